"""On PostgreSQL, every commit that adds to the change feed NOTIFYs `jobd_changes`.

A broker that did not make a change learns of it from this (store/sql/follow.py): it
LISTENs on its own connection and reads `changes` after the revision it heard. The
trigger runs in the writer's transaction, so the notification goes out with the commit
and only with it (PostgreSQL sends a transaction's notifications when it commits), and
costs the writer no round trip. The payload is the newest revision the statement
added, so a broker that made the change itself skips it without a read. SQLite has one
broker and no NOTIFY: nothing to do there.

Revision ID: 0012
Revises: 0011
"""

from alembic import op

revision = "0012"
down_revision = "0011"

# The channel's name is store/sql/follow.py's CHANNEL; a migration keeps its own copy.
_FUNCTION = """
CREATE FUNCTION jobd_notify_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobd_changes', (SELECT max(revision) FROM added)::text);
    RETURN NULL;
END
$$
"""
_TRIGGER = """
CREATE TRIGGER changes_notify AFTER INSERT ON changes
REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION jobd_notify_changes()
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_FUNCTION)
    op.execute(_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS changes_notify ON changes")
    op.execute("DROP FUNCTION IF EXISTS jobd_notify_changes()")

"""Changes that hold a job's secret env values are marked, so they can be scrubbed.

When a job ends (Succeeded, Failed, Cancelled) or is deleted, its secret values leave
the store: its row holds the mask instead (controllers/transitions.py), and so must the
earlier versions of it that the change feed keeps. The `secret` flag and a partial index
on it find those rows without a scan of the feed; no other change pays for the index.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.add_column(
        "changes",
        sa.Column("secret", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    # As schema.py says it, so each dialect writes it as the store's queries do (a
    # query uses a partial index only when its WHERE says what the index's does).
    secret = sa.column("secret", sa.Boolean) == sa.true()
    op.create_index(
        "ix_changes_secret",
        "changes",
        ["key"],
        sqlite_where=secret,
        postgresql_where=secret,
    )


def downgrade() -> None:
    op.drop_index("ix_changes_secret", "changes")
    op.drop_column("changes", "secret")

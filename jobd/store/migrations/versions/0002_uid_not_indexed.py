"""A job's uid is no longer a unique index.

Nothing looks a job up by its uid, and a random key in a B-tree dirties a page of the
index anywhere for every insert: on a store of 50,000 jobs it cost an apply about a fifth
of its SQL time. The uid stays a column; its uniqueness is that of a version-4 UUID.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

# SQLite names a constraint written inline nowhere; this convention names it for the drop.
_NAMES = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("jobs", naming_convention=_NAMES) as batch:
            batch.drop_constraint("uq_jobs_uid", type_="unique")
        # The copy of the table got its indexes back as reflected, without the DESC of
        # the queue's order: that one is made again as the scheduler reads it.
        op.drop_index("ix_jobs_queue", "jobs")
        op.create_index("ix_jobs_queue", "jobs", ["phase", "ready", sa.desc("priority"), "id"])
    else:
        op.drop_constraint("jobs_uid_key", "jobs", type_="unique")


def downgrade() -> None:
    # Named as the upgrade finds it on each dialect (PostgreSQL named 0001's itself).
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("jobs") as batch:
        batch.create_unique_constraint("jobs_uid_key" if postgres else "uq_jobs_uid", ["uid"])

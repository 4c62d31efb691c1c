"""Fair share's usage, kept across restarts, and each queued project's head off an index.

`usage` holds the decayed usage of each project (user "") and of each user within a
project; `usage_charged` each run charged to it, so a run is charged once. The index
`ix_jobs_project_queue` reads one project's ready queued jobs in the scheduler's order.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.create_table(
        "usage",
        sa.Column("project", sa.String(63), primary_key=True),
        sa.Column("user", sa.String(32), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_table(
        "usage_charged",
        sa.Column("job", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("attempt", sa.Integer, primary_key=True, autoincrement=False),
    )
    op.create_index(
        "ix_jobs_project_queue", "jobs", ["phase", "ready", "project", sa.desc("priority"), "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_project_queue", "jobs")
    op.drop_table("usage_charged")
    op.drop_table("usage")

"""The workers of a multi-host job's members (`job_members`), looked up by worker.

A gang ("job of N nodes") is bound to N workers; `jobs.worker` holds rank 0's. This table
holds every rank's, so a worker's jobs (its agent's list, a lost worker's jobs) include
the gangs it runs a member of. Only jobs of more than one node have rows.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    op.create_table(
        "job_members",
        sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("rank", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("worker", sa.String(253), nullable=False),
    )
    op.create_index("ix_job_members_worker", "job_members", ["worker"])


def downgrade() -> None:
    op.drop_index("ix_job_members_worker", "job_members")
    op.drop_table("job_members")

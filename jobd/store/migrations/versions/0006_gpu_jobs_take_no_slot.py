"""A job asking for GPUs takes its GPUs and no CPU slot: its row's `slots` is 0.

Before, every job took a slot per GPU (and at least one), and the scheduler's read of
the queue (store/sql/jobs.py, `queue_head`) skips the jobs whose `slots` exceed the free
slots: an old GPU job's row would keep it unread while CPU jobs fill the slots.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"

_jobs = sa.table("jobs", sa.column("slots", sa.Integer), sa.column("gpus", sa.Integer))


def upgrade() -> None:
    op.execute(_jobs.update().where(_jobs.c.gpus > 0).values(slots=0))


def downgrade() -> None:
    op.execute(_jobs.update().where(_jobs.c.gpus > 0).values(slots=_jobs.c.gpus))

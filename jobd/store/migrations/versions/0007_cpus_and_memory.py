"""Jobs hold CPUs and memory of their worker's inventory: two columns of the queue.

The scheduler's read of the queue (store/sql/jobs.py, `queue_head`) skips the jobs that
fit no worker's free room; a job now also names `resources.cpus` (kept in thousandths)
and `resources.memory` (bytes). A job stored before asked for neither: its row is filled
with 0, which is what it holds (best effort, as before).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("millicpus", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("memory", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("memory")
        batch.drop_column("millicpus")

"""The leader's lease and epoch: one row, held by the broker that runs the loops.

A broker on PostgreSQL takes the row when it is free or its lease ran out, raising the
epoch by one; every write transaction of the leader checks that epoch in the same
transaction (store/sql/leadership.py), so a leader that was paused and woke writes
nothing. Epoch 0 and no holder: nobody has led yet.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    lease = op.create_table(
        "leader_lease",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("url", sa.String(512), nullable=False),
        sa.Column("renewed_at", sa.Float, nullable=False),
        sa.Column("lease_s", sa.Float, nullable=False),
    )
    op.bulk_insert(
        lease, [{"id": 1, "epoch": 0, "holder": "", "url": "", "renewed_at": 0.0, "lease_s": 0.0}]
    )


def downgrade() -> None:
    op.drop_table("leader_lease")

"""Receipts of the agents' requests, so a report sent again after a failover is applied once.

`receipts` holds, per worker and kind of request ("reports", "events"), the last one its
agent had applied (the agent's run and the request's number); it is claimed in the
transaction that applies the request (store/sql/receipts.py).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.create_table(
        "receipts",
        sa.Column("worker", sa.String(253), primary_key=True),
        sa.Column("stream", sa.String(16), primary_key=True),
        sa.Column("run", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("receipts")

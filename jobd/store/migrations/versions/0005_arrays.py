"""Job arrays: one row per array (its document), and the counter of their ids.

An array's members are ordinary rows of `jobs`; the array's row names them (by id, in
its body) and is written in the same transaction as they are. Arrays are not in the
change feed: nothing watches them, and they do not change once made.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "arrays",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("project", sa.String(63), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.UniqueConstraint("project", "name", name="uq_arrays_project_name"),
    )
    meta = sa.table("jobd_meta", sa.column("key", sa.String), sa.column("value", sa.BigInteger))
    op.bulk_insert(meta, [{"key": "array_id", "value": 0}])


def downgrade() -> None:
    op.execute("DELETE FROM jobd_meta WHERE key = 'array_id'")
    op.drop_table("arrays")

"""Jobs record their owner; user tokens name the user they speak for.

A job's `metadata.owner` (api/identity.py) gets a column, so usage per user and a
user's running jobs are read off the table; a user token's `user` is the identity its
requests carry. Rows stored before have neither (NULL): jobs of no known owner, tokens
of no user, as they were.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(32)))
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("user", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("user")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("owner")

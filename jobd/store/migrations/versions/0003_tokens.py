"""Bearer tokens with roles: one row per token, its SHA-256 digest and never the token.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("label", sa.String(63), primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("projects", sa.Text, nullable=False),
        sa.Column("worker", sa.String(253)),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("last_used_at", sa.String(40)),
    )


def downgrade() -> None:
    op.drop_table("tokens")

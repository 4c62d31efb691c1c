"""The first schema: jobs, their dependencies, projects, workers, changes, events.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "jobd_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(
        sa.table("jobd_meta", sa.column("key", sa.String), sa.column("value", sa.BigInteger)),
        [{"key": k, "value": 0} for k in ("revision", "job_id", "event_seq")],
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("uid", sa.String(36), nullable=False, unique=True),
        sa.Column("project", sa.String(63), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("ready", sa.Boolean, nullable=False),
        sa.Column("slots", sa.Integer, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("worker", sa.String(253)),
        sa.Column("nominated_worker", sa.String(253)),
        sa.Column("resource_version", sa.BigInteger, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.UniqueConstraint("project", "name", name="uq_jobs_project_name"),
    )
    op.create_index("ix_jobs_queue", "jobs", ["phase", "ready", sa.desc("priority"), "id"])
    nominated = sa.text("nominated_worker IS NOT NULL")
    op.create_index(
        "ix_jobs_nominated",
        "jobs",
        ["id"],
        sqlite_where=nominated,
        postgresql_where=nominated,
    )
    op.create_index("ix_jobs_worker", "jobs", ["worker", "phase"])
    op.create_index("ix_jobs_name", "jobs", ["name"])
    op.create_table(
        "job_deps",
        sa.Column("parent", sa.Integer, primary_key=True),
        sa.Column("child", sa.Integer, primary_key=True),
    )
    for name, key_type in (("projects", sa.String(63)), ("workers", sa.String(253))):
        op.create_table(
            name,
            sa.Column("name", key_type, primary_key=True),
            sa.Column("resource_version", sa.BigInteger, nullable=False),
            sa.Column("body", sa.Text, nullable=False),
        )
    op.create_table(
        "changes",
        sa.Column("revision", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("op", sa.String(8), nullable=False),
        sa.Column("key", sa.String(320), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("ts", sa.String(40), nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("job", sa.Integer),
        sa.Column("worker", sa.String(253)),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_events_job", "events", ["job", "seq"])
    op.create_index("ix_events_event", "events", ["event", "seq"])


def downgrade() -> None:
    for name in ("events", "changes", "workers", "projects", "job_deps", "jobs", "jobd_meta"):
        op.drop_table(name)

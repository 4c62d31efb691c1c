"""The relational schema behind the Store, shared by SQLite and PostgreSQL.

Objects keep their whole JSON document in `body`; the columns beside it are the few
fields queries filter or order by, so each query is an index range, never a scan of
every job. Migrations (Alembic, in migrations/) create and evolve these tables.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "arrays",
    "changes",
    "events",
    "job_deps",
    "job_members",
    "jobs",
    "leader_lease",
    "meta",
    "metadata",
    "projects",
    "receipts",
    "tokens",
    "usage",
    "usage_charged",
    "workers",
]

metadata = sa.MetaData()

meta = sa.Table(
    "jobd_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uid", sa.String(36), nullable=False),
    sa.Column("project", sa.String(63), nullable=False),
    sa.Column("name", sa.String(63), nullable=False),
    sa.Column("phase", sa.String(16), nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("ready", sa.Boolean, nullable=False),
    sa.Column("slots", sa.Integer, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    # What the job holds of its worker's inventory: CPUs in thousandths, memory in bytes
    # (0: it names none). The queue's read skips what fits no worker's free room.
    sa.Column("millicpus", sa.Integer, nullable=False, server_default="0"),
    sa.Column("memory", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("worker", sa.String(253)),
    sa.Column("nominated_worker", sa.String(253)),
    sa.Column("owner", sa.String(32)),  # metadata.owner: a Unix user name, or none
    sa.Column("resource_version", sa.BigInteger, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.UniqueConstraint("project", "name", name="uq_jobs_project_name"),
    # Matches ORDER BY priority DESC, id: the queue is read off the index, never sorted.
    sa.Index("ix_jobs_queue", "phase", "ready", sa.desc("priority"), "id"),
    # One project's queue in the same order: fair share reads each queued project's head.
    sa.Index("ix_jobs_project_queue", "phase", "ready", "project", sa.desc("priority"), "id"),
    sa.Index("ix_jobs_worker", "worker", "phase"),
    sa.Index("ix_jobs_name", "name"),
)
# Few jobs are nominated at any time: a partial index finds them without a scan.
_nominated = jobs.c.nominated_worker.is_not(None)
sa.Index("ix_jobs_nominated", jobs.c.id, sqlite_where=_nominated, postgresql_where=_nominated)

# Job arrays (api/arrays.py): the document, whose status names the member jobs. Ids come
# from the `array_id` counter of jobd_meta, taken in the transaction that adds the members.
arrays = sa.Table(
    "arrays",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("project", sa.String(63), nullable=False),
    sa.Column("name", sa.String(63), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.UniqueConstraint("project", "name", name="uq_arrays_project_name"),
)

job_deps = sa.Table(
    "job_deps",
    metadata,
    sa.Column("parent", sa.Integer, primary_key=True),
    sa.Column("child", sa.Integer, primary_key=True),
)

# The workers of a multi-host job's members, by rank (rank 0 is also `jobs.worker`): a
# worker's jobs are looked up by name (its agent's list, a lost worker's jobs), and a gang
# is bound to each of its members' workers. Written only for jobs of more than one node.
job_members = sa.Table(
    "job_members",
    metadata,
    sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("rank", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("worker", sa.String(253), nullable=False),
    sa.Index("ix_job_members_worker", "worker"),
)

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("resource_version", sa.BigInteger, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("name", sa.String(253), primary_key=True),
    sa.Column("resource_version", sa.BigInteger, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)

changes = sa.Table(
    "changes",
    metadata,
    sa.Column("revision", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("op", sa.String(8), nullable=False),
    sa.Column("key", sa.String(320), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    # The body holds a job's secret env values (api/secrets.py): rewritten, masked, when
    # the job ends or is deleted (migration 0004).
    sa.Column("secret", sa.Boolean, nullable=False, server_default=sa.false()),
)
# Few changes hold secrets: a partial index finds a job's without a scan, and costs the
# writes of every other change nothing.
_secret = changes.c.secret == sa.true()
sa.Index("ix_changes_secret", changes.c.key, sqlite_where=_secret, postgresql_where=_secret)

events = sa.Table(
    "events",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.String(40), nullable=False),
    sa.Column("event", sa.String(64), nullable=False),
    sa.Column("job", sa.Integer),
    sa.Column("worker", sa.String(253)),
    sa.Column("body", sa.Text, nullable=False),
    sa.Index("ix_events_job", "job", "seq"),
    sa.Index("ix_events_event", "event", "seq"),
)

# Bearer tokens with roles (broker/auth/tokens.py): only a digest of each is kept, never the
# token itself. Not resources: no revision, no change feed; the broker reads the whole
# (small) table into memory.
tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("label", sa.String(63), primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("projects", sa.Text, nullable=False),  # a JSON list of project names
    sa.Column("worker", sa.String(253)),
    sa.Column("user", sa.String(32)),  # a user token's user (api/identity.py)
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("last_used_at", sa.String(40)),
)

# Fair share (controllers/fairshare.py): the decayed usage of each project (user "") and
# of each user within a project, as it was worth at `at` (seconds since the epoch).
usage = sa.Table(
    "usage",
    metadata,
    sa.Column("project", sa.String(63), primary_key=True),
    sa.Column("user", sa.String(32), primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)
# Each run charged to `usage` once: a charge heard twice (a resync) is not counted twice.
usage_charged = sa.Table(
    "usage_charged",
    metadata,
    sa.Column("job", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("attempt", sa.Integer, primary_key=True, autoincrement=False),
)

# The last request of each kind ("reports", "events") each worker's agent had applied
# (store/sql/receipts.py): one sent again after an unknown outcome (a broker killed after
# its commit, before answering) is acknowledged, not applied twice.
receipts = sa.Table(
    "receipts",
    metadata,
    sa.Column("worker", sa.String(253), primary_key=True),
    sa.Column("stream", sa.String(16), primary_key=True),
    sa.Column("run", sa.String(64), nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
)

# Which broker leads (PostgreSQL; a SQLite store's broker always leads): one row, id 1.
# `epoch` goes up by one at each election and fences every write of the leader
# (store/sql/leadership.py); `renewed_at` and `lease_s` are on the database's clock, so
# brokers on hosts whose clocks disagree still agree on when a lease ran out.
leader_lease = sa.Table(
    "leader_lease",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("holder", sa.String(64), nullable=False),  # one broker process; "" when none
    sa.Column("url", sa.String(512), nullable=False),  # the holder's advertised URL
    sa.Column("renewed_at", sa.Float, nullable=False),  # seconds since 1970, the database's
    sa.Column("lease_s", sa.Float, nullable=False),
)

"""`election`: the two ways brokers on PostgreSQL could elect a leader, measured side by side.

The issue (26) names two: a **lease row** with an epoch (what jobd does,
store/sql/leadership.py), and a **session advisory lock** plus an epoch row. For each:

- the time a takeover takes once the holder is killed with SIGKILL: a holder process
  takes the lease (or the lock) and keeps it (renewing the row, or pinging its session,
  every retry period); it is killed, and a candidate trying as a standby broker does
  (every retry period, or when the lease runs out if sooner) measures how long until it
  holds it;
- the cost of one renewal: its round trip (p50, p99) and the WAL it writes, over many.

Opt-in (`--scenario election`), PostgreSQL only (`JOBD_BENCH_DB`). Short timings: a
lease of 2 s, a retry period of 0.25 s. With the lease row a takeover waits for the
lease to run out (lease + up to one retry, whatever killed the holder); with the lock
it waits only for the server to see the holder's connection close, which a SIGKILL
makes at once, but a paused holder (SIGSTOP, a frozen VM) keeps its session and the lock
until a server-side timeout ends the session: a lease again, kept by the server.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from jobd.bench.context import BenchContext, Skipped
from jobd.bench.databases import fresh_database
from jobd.bench.stats import Result, ms, percentile
from jobd.store import open_store
from jobd.store.sql.engine import normalize_url
from jobd.store.sql.leadership import LeaderLease

__all__ = ["run_election"]

LEASE_S = 2.0
RETRY_S = 0.25
LOCK_KEY = 26026  # the advisory lock's key: any number both sides agree on

_LEASE_HOLDER = """
import sys, time
from jobd.store.sql.leadership import LeaderLease
lease = LeaderLease(sys.argv[1], "holder", "http://holder", {lease})
epoch = lease.take()
print(epoch, flush=True)
while True:
    time.sleep({retry})
    lease.renew(epoch)
"""
_LOCK_HOLDER = """
import sys, time
import psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
conn.execute("SELECT pg_advisory_lock({key})")
print(1, flush=True)
while True:
    time.sleep({retry})
    conn.execute("SELECT 1")
"""


async def run_election(ctx: BenchContext) -> Result:
    if ctx.db is None:
        raise Skipped("needs PostgreSQL: set JOBD_BENCH_DB=postgresql://...")
    ctx.begin("election")
    kills = ctx.sized(3, 10, 20)
    renewals = ctx.sized(200, 1000, 5000)
    with fresh_database(ctx.db, "election") as url:
        open_store(url).close()  # migrated: the lease row is there
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        lease = LeaderLease(url, "candidate", "http://candidate", LEASE_S)
        lock = sa.create_engine(normalize_url(url), isolation_level="AUTOCOMMIT")
        try:
            row_takeovers = _takeovers(
                _LEASE_HOLDER, plain, lambda: _take(lease), lambda: _lease_left(lease), kills
            )
            lock_takeovers = _takeovers(
                _LOCK_HOLDER, plain, lambda: _lock(lock), lambda: RETRY_S, kills
            )
            epoch = lease.take() or 0
            row_renew = _renewals(renewals, lambda: lease.renew(epoch))
            row_wal = _renew_wal(lock, epoch)
            lock_renew = _renewals(renewals, lambda: _ping(lock))
        finally:
            lease.close()
            lock.dispose()
    result = Result("election", n=kills, size=ctx.size)
    result.latencies(row_takeovers)
    result.extra = {
        "lease_row_takeover_p50_s": percentile(row_takeovers, 50),
        "lease_row_takeover_p99_s": percentile(row_takeovers, 99),
        "advisory_lock_takeover_p50_s": percentile(lock_takeovers, 50),
        "advisory_lock_takeover_p99_s": percentile(lock_takeovers, 99),
        "lease_row_renew_p50_ms": ms(percentile(row_renew, 50)),
        "lease_row_renew_p99_ms": ms(percentile(row_renew, 99)),
        "lease_row_renew_wal_bytes": row_wal,
        "advisory_lock_ping_p50_ms": ms(percentile(lock_renew, 50)),
        "advisory_lock_ping_p99_ms": ms(percentile(lock_renew, 99)),
        "advisory_lock_ping_wal_bytes": 0,  # a SELECT writes none
    }
    result.notes = (
        f"lease {LEASE_S:g} s, retry {RETRY_S:g} s; takeover after SIGKILL (p50): lease row "
        f"{_secs(row_takeovers)}, advisory lock {_secs(lock_takeovers)}; one renewal of the "
        f"row writes {row_wal} bytes of WAL"
    )
    return result


def _secs(samples: list[float]) -> str:
    return f"{percentile(samples, 50) or 0:.2f} s"


def _take(lease: LeaderLease) -> bool:
    taken = lease.take()
    if taken is not None:
        lease.release(taken)  # free again for the next round's holder
    return taken is not None


def _lease_left(lease: LeaderLease) -> float:
    """As a standby broker waits (broker/leadership.py): a retry period, or until the
    holder's lease runs out if that is sooner."""
    return min(RETRY_S, max(lease.read().left_s, 0.0) + 0.01)


def _lock(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        got = conn.execute(sa.text(f"SELECT pg_try_advisory_lock({LOCK_KEY})")).scalar()
        if got:
            conn.execute(sa.text(f"SELECT pg_advisory_unlock({LOCK_KEY})"))
    return bool(got)


def _ping(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))


def _takeovers(
    holder_code: str, url: str, try_take: Callable[[], bool], next_try: Callable[[], float], n: int
) -> list[float]:
    return [_takeover(holder_code, url, try_take, next_try) for _ in range(n)]


def _takeover(
    holder_code: str, url: str, try_take: Callable[[], bool], next_try: Callable[[], float]
) -> float:
    """Start a holder, wait until it holds, SIGKILL it; seconds until `try_take` succeeds."""
    code = holder_code.format(lease=LEASE_S, retry=RETRY_S, key=LOCK_KEY)
    holder = subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip()
        time.sleep(RETRY_S * 2)  # renewed at least once: a holder in its steady state
        killed = time.monotonic()
        holder.send_signal(signal.SIGKILL)
        while not try_take():
            time.sleep(next_try())
        return time.monotonic() - killed
    finally:
        holder.kill()
        holder.wait()


def _renewals(n: int, renew: Callable[[], object]) -> list[float]:
    took = []
    for _ in range(n):
        started = time.perf_counter()
        renew()
        took.append(time.perf_counter() - started)
    return took


def _renew_wal(engine: sa.Engine, epoch: int) -> int:
    """The WAL one renewal of the row writes, as the server counts it for that statement
    alone (the server-wide WAL position moves with every other database's writes)."""
    renew = (
        "UPDATE leader_lease SET renewed_at = extract(epoch FROM clock_timestamp()) "
        f"WHERE id = 1 AND holder = 'candidate' AND epoch = {int(epoch)}"
    )
    with engine.connect() as conn:
        plan: Any = conn.execute(sa.text(f"EXPLAIN (ANALYZE, WAL, FORMAT JSON) {renew}")).scalar()
    return int(plan[0]["Plan"].get("WAL Bytes", 0))

"""A store URL may name several PostgreSQL hosts, as libpq does: the driver gets them all.

`postgresql://u@a:5432,b:5433/db?target_session_attrs=read-write` (libpq's URI) and
`postgresql://u@/db?host=a,b&port=5432,5433` (its keywords) both reach psycopg with
every host, port and `target_session_attrs`, so a broker follows a PostgreSQL failover
(Patroni and the like): libpq tries the hosts in order and keeps the first that is up
and takes writes. Here the first host is a closed port on 127.0.0.1 and the second the
test's server: the store opens, writes, reads, and its LISTEN connection (made with the
same arguments) hears a commit.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from jobd.api.models import ObjectMeta, Project
from jobd.store.sql import SQLStore, normalize_url, open_store

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]


def _closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _uri_form(postgres_url: str) -> str:
    url = make_url(postgres_url)
    hosts = f"127.0.0.1:{_closed_port()},{url.host}:{url.port or 5432}"
    return f"postgresql://{url.username}@{hosts}/{url.database}?target_session_attrs=read-write"


def _keyword_form(postgres_url: str) -> str:
    url = make_url(postgres_url)
    hosts, ports = f"127.0.0.1,{url.host}", f"{_closed_port()},{url.port or 5432}"
    return (
        f"postgresql://{url.username}@/{url.database}"
        f"?host={hosts}&port={ports}&target_session_attrs=read-write"
    )


@pytest.fixture(params=[_uri_form, _keyword_form], ids=["uri", "keywords"])
def two_hosts(request: pytest.FixtureRequest, postgres_url: str) -> Iterator[SQLStore]:
    store = open_store(request.param(postgres_url))
    yield store
    store.close()


def test_the_driver_gets_every_host_and_the_session_attrs(two_hosts: SQLStore) -> None:
    engine = two_hosts.engine
    _args, params = engine.dialect.create_connect_args(engine.url)
    assert params["host"].count(",") == 1 and params["port"].count(",") == 1
    assert params["target_session_attrs"] == "read-write"


async def test_the_store_works_on_the_host_that_is_up(two_hosts: SQLStore) -> None:
    async with two_hosts.change_signal() as signal:
        written = two_hosts.put_project(Project(metadata=ObjectMeta(name="reached")))
        assert await signal.wait(5.0) == written.metadata.resource_version
    found = two_hosts.get_project("reached")
    assert found is not None and found.metadata.uid == written.metadata.uid


def test_libpq_uris_become_sqlalchemys_multihost_form() -> None:
    assert normalize_url("postgresql://u@a:5432,b:5433/db?target_session_attrs=read-write") == (
        "postgresql+psycopg://u@/db?host=a:5432&host=b:5433&target_session_attrs=read-write"
    )
    assert normalize_url("postgres://a:1,b/db") == "postgresql+psycopg:///db?host=a:1&host=b"
    # One host, several without ports, the keyword form: as they were.
    for kept in ("u@a:5432/db", "u:pw@a,b/db", "u@/db?host=a,b&port=1,2"):
        assert normalize_url(f"postgresql://{kept}") == f"postgresql+psycopg://{kept}"

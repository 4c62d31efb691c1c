"""A worker host needs none of the broker's weight: no store, no web server, no rich, no
greenlet (SQLAlchemy's, which structlog would load), no pydantic; nor httpx for an
http:// broker.

Each check runs in a fresh interpreter, since this test process has loaded everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BROKER_ONLY = {"sqlalchemy", "alembic", "fastapi", "uvicorn", "starlette", "uvloop", "psycopg"}
BROKER_PACKAGES = ("jobd.store", "jobd.broker", "jobd.controllers")


def _modules_after(code: str) -> set[str]:
    shown = "\nimport json, sys; print(json.dumps(sorted(k for k, v in sys.modules.items() if v)))"
    result = subprocess.run(
        [sys.executable, "-c", code + shown], capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def _broker_parts(modules: set[str]) -> set[str]:
    top = {m.split(".")[0] for m in modules} & BROKER_ONLY
    return top | {m for m in modules if m.startswith(BROKER_PACKAGES)}


def test_importing_the_agent_loads_no_store_and_no_server() -> None:
    loaded = _modules_after("import jobd.worker.agent")
    assert "jobd.worker.agent" in loaded
    assert not _broker_parts(loaded)


def _worker_modules(tmp_path: Path, server: str) -> set[str]:
    # The command as `jobd worker` runs it, up to the start of its event loop.
    args = ["worker", "--server", server, "--token", "t", "--gpus", "none"]
    args += ["--log-dir", str(tmp_path)]
    return _modules_after(
        "from jobd.daemon import main as jobd_main\n"
        "jobd_main._run = lambda main, **how: None\n"
        f"jobd_main.cli.main({args!r}, prog_name='jobd', standalone_mode=False)"
    )


def test_jobd_worker_command_loads_no_store_no_server_no_rich_no_greenlet(tmp_path: Path) -> None:
    loaded = _worker_modules(tmp_path, "http://127.0.0.1:9")
    assert {"jobd.worker.agent", "h11", "structlog"} <= loaded
    # An http:// broker is reached with h11 on anyio (wire/plain_async.py), never httpx.
    assert not {m for m in loaded if m.split(".")[0] in ("httpx", "httpcore")}
    assert not _broker_parts(loaded)
    assert not {m for m in loaded if m == "rich" or m.startswith("rich.")}
    assert "greenlet" not in loaded
    # The agent reads jobs as JSON (worker/jobview.py) and sends plain JSON bodies: no
    # pydantic, no models (tests/integration/test_the_agent_runs_jobs_without_pydantic.py
    # follows a real worker through jobs).
    assert not {m for m in loaded if m.split(".")[0] in ("pydantic", "pydantic_core")}
    assert not {"jobd.api.models", "jobd.wire.models"} & loaded


def test_jobd_worker_loads_a_tls_library_only_for_an_https_broker(tmp_path: Path) -> None:
    # OpenSSL (_ssl) is ~4.5 MiB of an idle agent: not loaded for plain brokers
    # (daemon/lazy_ssl.py); loaded at once when one broker of the list is https://.
    assert "_ssl" not in _worker_modules(tmp_path / "plain", "http://127.0.0.1:9,http://[::1]:9")
    assert "_ssl" in _worker_modules(tmp_path / "tls", "http://127.0.0.1:9,https://127.0.0.1:9")

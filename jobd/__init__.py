"""jobd: a job scheduler for GPU and CPU work (docs/architecture.md).

The Python SDK is named here and loaded on first use (PEP 562): `import jobd` costs
nothing, since the per-job supervisor (`jobd.worker.shim`) runs under `python -I -S`
with the standard library only, and a workload's `import jobd.client` must stay as light.

- `jobd.Client`, `jobd.AsyncClient`: the broker's API from Python (docs/python.md).
- `jobd.Executor`: run Python functions as jobs, submitit's way (extra `jobd[executor]`).
- `jobd.ApiError` (the broker refused: `.status`, `.message`), `jobd.BrokerUnreachable`,
  `jobd.JobFailed` (an executor's job ended without the function's outcome).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing itself stays unloaded: the supervisor imports this package
if TYPE_CHECKING:
    from typing import Any

    from jobd.sdk.async_client import AsyncClient
    from jobd.sdk.client import Client
    from jobd.sdk.executor import Executor, JobFailed, JobFuture
    from jobd.wire.errors import ApiError, BrokerUnreachable

__all__ = [
    "ApiError",
    "AsyncClient",
    "BrokerUnreachable",
    "Client",
    "Executor",
    "JobFailed",
    "JobFuture",
]

_WHERE = {
    "ApiError": "jobd.wire.errors",
    "AsyncClient": "jobd.sdk.async_client",
    "BrokerUnreachable": "jobd.wire.errors",
    "Client": "jobd.sdk.client",
    "Executor": "jobd.sdk.executor",
    "JobFailed": "jobd.sdk.executor",
    "JobFuture": "jobd.sdk.executor",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'jobd' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

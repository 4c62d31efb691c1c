"""The Python SDK: `jobd.Client`, `jobd.AsyncClient` and `jobd.Executor` (docs/python.md).

`documents` turns what a caller says into the wire's calls and the answers into the
models of `jobd.api` (no I/O); `client` and `async_client` send them over the wire's
clients; `connection` finds the broker as `job` does; `executor` ships a function to a
job and `runner` runs it there. The package imports none of its modules, so the runner
(which a job starts with `python -m jobd.sdk.runner`) loads only what it uses.
"""

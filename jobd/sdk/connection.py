"""Where the SDK finds its broker: as `job` does, argument > environment > context.

The arguments stand for `job`'s flags, and the same environment variables stand behind
them (`JOBD_URL`, `JOBD_TOKEN`, `JOBD_TOKEN_FILE`, `JOBD_CONTEXT`); the contexts of
`~/.config/jobd/config.yaml` and the local broker's admin token come after, through the
CLI's own resolution (`jobd.cli.contexts`, which needs no click).
"""

from __future__ import annotations

import os
from pathlib import Path

from jobd.cli.contexts import ConfigError, Connection, resolve_connection

__all__ = ["ConfigError", "Connection", "find_broker"]


def find_broker(
    server: str | None = None,
    token: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    context: str | None = None,
) -> Connection:
    """The broker's URL, the token for it and the context's default project.

    ConfigError when a context named (or the token file) cannot be used.
    """
    env = os.environ
    file = token_file or env.get("JOBD_TOKEN_FILE") or None
    return resolve_connection(
        server or env.get("JOBD_URL") or None,
        token or env.get("JOBD_TOKEN") or None,
        Path(file).expanduser() if file else None,
        context or env.get("JOBD_CONTEXT") or None,
    )

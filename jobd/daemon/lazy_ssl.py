"""An agent that speaks plain HTTP to its brokers loads no TLS library until one is used.

Importing `ssl` maps libssl and libcrypto and initialises OpenSSL: ~4.5 MiB of an idle
agent's RSS, for an agent whose brokers are all http:// and which never encrypts a byte.
Two imports stand in the way. asyncio imports `ssl` if it can and does without it (its
TLS transports are then refused, and the agent never asks for one). anyio's asyncio
backend imports it too, through its socket and TLS stream modules, but touches it only to
make a TLS stream, and binds `ssl.SSLContext` for annotations alone.

So `defer()` imports asyncio while `ssl` is marked absent, then puts a stand-in module in
its place: `SSLContext` is a placeholder class (for those annotations), and any other
name loads the real `ssl`, which then serves every later lookup, the stand-in's own
included. An agent whose calls go through httpx (an https:// broker, a Unix socket, a
proxy) needs ssl from the start: `jobd worker` defers it only when none does
(daemon/main.py). Next stage: none; the process then imports what it runs.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["defer", "loaded"]


def _real_ssl() -> types.ModuleType:
    """The real `ssl`, loaded now if need be; the stand-in then holds its names too."""
    stand_in = sys.modules.get("ssl")
    if isinstance(stand_in, _DeferredSsl):
        del sys.modules["ssl"]
    real = importlib.import_module("ssl")
    if isinstance(stand_in, _DeferredSsl):
        stand_in.__dict__.update(real.__dict__)
    return real


class _SSLContextType(type):
    """Checks against the placeholder are checks against the real SSLContext."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, _real_ssl().SSLContext)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _real_ssl().SSLContext)


class _SSLContextPlaceholder(metaclass=_SSLContextType):
    """Named as anyio's modules name it at import; made, it is the real one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _real_ssl().SSLContext(*args, **kwargs)


class _DeferredSsl(types.ModuleType):
    """`ssl` until one of its names is used; then the real module's names, in it too."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's questions (`__path__`): not ssl's
            raise AttributeError(name)
        return getattr(_real_ssl(), name)


def defer() -> None:
    """Import asyncio without ssl, then let ssl load at its first use. Call it before
    anything imports asyncio or anyio's backend; a process that has already loaded ssl
    keeps it."""
    if "ssl" in sys.modules or "asyncio" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        import asyncio  # noqa: F401  (it records that there is no ssl)
    finally:
        stand_in = _DeferredSsl("ssl", "loaded at the first use of one of its names")
        stand_in.SSLContext = _SSLContextPlaceholder  # type: ignore[attr-defined]
        sys.modules["ssl"] = stand_in


def loaded() -> bool:
    """Whether OpenSSL is loaded in this process (the real `ssl`, not the stand-in)."""
    return "_ssl" in sys.modules

"""A worker's advertised address: what the other members of a multi-host job dial.

The address lands in every member's environment (`JOBD_MASTER_ADDR`, `MASTER_ADDR`,
`JOBD_NODE_ADDRS`) and a workload hands it to its rendezvous, so only a bare IP address
or a host name is taken: no port, no scheme, no spaces or commas (the list of addresses
is comma-separated), nothing a shell or a URL would read as more. An address nobody can
dial (0.0.0.0, ::, a multicast group) is refused too. Standard library only: the worker's
settings check it before pydantic is loaded.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["MAX_ADDRESS_LENGTH", "check_address"]

MAX_ADDRESS_LENGTH = 253  # the longest DNS name
# RFC 1123 labels: letters, digits and inner hyphens, 1 to 63 each, dot-separated.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")


def check_address(text: str) -> str:
    """`text` if it is an IP address others can dial or a host name; ValueError saying why."""
    if not text or len(text) > MAX_ADDRESS_LENGTH:
        raise ValueError(f"an address has 1 to {MAX_ADDRESS_LENGTH} characters, not {len(text)}")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return _check_host_name(text)
    if ip.is_unspecified or ip.is_multicast:
        raise ValueError(f"{text!r} cannot be dialled: give this host's own address")
    return text


def _check_host_name(text: str) -> str:
    if text.replace(".", "").isdigit():  # 10.0.0.300: a broken IP, not a name
        raise ValueError(f"{text!r} is not a valid IP address")
    if not _HOST_NAME.match(text):
        raise ValueError(
            f"{text!r} is neither an IP address nor a host name (letters, digits, '-' "
            "and '.'; no port, scheme or spaces)"
        )
    return text

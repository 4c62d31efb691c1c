"""The protocol version every request of jobd's clients states, and which the broker takes.

Brokers and agents are upgraded one at a time (docs/operations.md, "Upgrading"), so for a
while an agent of one release talks to a broker of another. Every client of jobd (the
CLI's two, the SDK's, the agent's, MCP's) sends `X-Jobd-Protocol: PROTOCOL`. The broker
takes what workers send (registration, heartbeats, reports, output, events: the routes
of `routes.WORKER_PAYLOADS`) only from `OLDEST_WORKER_PROTOCOL` up to its own
`PROTOCOL`, and refuses anything else with 426 and a sentence naming both versions,
so a worker too old (or newer than its broker) says why instead of failing on a field.
The agent logs that refusal at most once a minute and keeps trying: its jobs run on
under their supervisors, its reports wait, and it carries on once the broker or the
agent is upgraded.

A request without the header was sent by a client older than versions: it spoke
protocol 1, which is what `UNSTATED` says. Users' requests (everything but a worker's)
are taken whatever their version: their bodies are validated field by field anyway.

`PROTOCOL` goes up when what an agent sends or expects changes in a way an older
broker or agent would misread; `OLDEST_WORKER_PROTOCOL` only when the broker stops
accepting an older agent's payloads (tests/integration/test_old_agents_payloads_are_accepted.py
replays a recorded one: it must be changed in the same commit, on purpose).

Standard library only, and nothing imported: the CLI and the agent load it at start.
"""

from __future__ import annotations

__all__ = [
    "OLDEST_WORKER_PROTOCOL",
    "PROTOCOL",
    "PROTOCOL_HEADER",
    "REFUSED_STATUS",
    "UNSTATED",
    "parse_protocol",
    "worker_refusal",
]

PROTOCOL_HEADER = "X-Jobd-Protocol"
PROTOCOL = 1  # what this jobd's clients speak, and the newest its broker takes
OLDEST_WORKER_PROTOCOL = 1  # the oldest agent's protocol this broker takes
UNSTATED = 1  # a request without the header: a client from before versions were sent
REFUSED_STATUS = 426  # Upgrade Required: one side must be upgraded to speak to the other


def parse_protocol(value: str | None) -> int:
    """The version a header's value states (UNSTATED for none); ValueError, naming the
    header, for a value that is no version."""
    if value is None:
        return UNSTATED
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise ValueError(f"{PROTOCOL_HEADER}: {value!r} is not a protocol version (an integer)")
    return int(text)


def worker_refusal(version: int) -> str | None:
    """Why a worker speaking `version` is refused, or None when the broker takes it."""
    if OLDEST_WORKER_PROTOCOL <= version <= PROTOCOL:
        return None
    accepted = f"{OLDEST_WORKER_PROTOCOL} to {PROTOCOL}"
    if version < OLDEST_WORKER_PROTOCOL:
        fix = "upgrade jobd on this worker's host"
    else:
        fix = "upgrade the brokers first (standby, then leader), then the workers"
    return (
        f"this worker speaks jobd protocol {version}, and this broker takes worker "
        f"protocols {accepted}: {fix} (docs/operations.md, Upgrading)"
    )

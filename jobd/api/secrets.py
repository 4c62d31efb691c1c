"""Secrets in job specs: which `env` values are secret, and the one rule that masks them.

A value in a job's `spec.env` is secret when its key matches one of the default patterns
(`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*_KEY`) or one its project adds in
`spec.secret_env_keys` (fnmatch-style globs, matched case-insensitively). A job carries
its project's patterns in `status.effective.secret_env_keys`, resolved as its other
effective settings are, so whoever holds a job document can tell its secrets without a
look at its project.

The URL and secret of each `spec.notify` target (a webhook) are secrets too, masked by
the same rule; they stay in the stored job when it ends, since the end is what they are
for (broker/notify/), and leave the store with the job.

`mask_job` is the one masking rule: every read surface of the broker (resource
documents, the watch, the apply answer) passes jobs through it, and only the worker that
runs a job reads it unmasked. When a job ends, `transitions.scrub_secrets` makes the same
replacement for good in the stored job, and the store in the feed's earlier versions of
it. Each puts `MASK` where a secret value was.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # api/models.py validates projects' patterns with check_patterns
    from jobd.api.models import Job

__all__ = [
    "DEFAULT_SECRET_ENV_KEYS",
    "MASK",
    "MAX_PATTERNS",
    "MAX_PATTERN_LENGTH",
    "check_patterns",
    "holds_secrets",
    "mask_env",
    "mask_job",
    "masked_keys",
    "patterns_of",
    "patterns_with",
    "secret_keys",
]

DEFAULT_SECRET_ENV_KEYS: tuple[str, ...] = ("*TOKEN*", "*SECRET*", "*PASSWORD*", "*_KEY")
# What a reader sees in place of a secret value, and what a finished job keeps.
MASK = "***"
MAX_PATTERNS = 64
MAX_PATTERN_LENGTH = 256
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def check_patterns(patterns: Sequence[str]) -> list[str]:
    """`patterns` as given; ValueError, one sentence, for one no key could be matched by."""
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"at most {MAX_PATTERNS} patterns, not {len(patterns)}")
    for i, pattern in enumerate(patterns):
        if not pattern.strip(" "):  # as the OpenAPI document says: not only spaces
            raise ValueError(f"pattern {i} is empty")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise ValueError(f"pattern {i} is over {MAX_PATTERN_LENGTH} characters")
        if _CONTROL_RE.search(pattern):
            raise ValueError(f"pattern {i} holds a NUL or control character")
    return list(patterns)


def patterns_of(job: Job) -> tuple[str, ...]:
    """The patterns that mark `job`'s secret keys: the defaults and its project's."""
    return patterns_with(job.status.effective.secret_env_keys)


def patterns_with(extra: Sequence[str] | None) -> tuple[str, ...]:
    """The defaults and a project's own patterns (its `secret_env_keys`, None: none)."""
    return DEFAULT_SECRET_ENV_KEYS + tuple(extra) if extra else DEFAULT_SECRET_ENV_KEYS


class _Secrecy:
    """Whether a key is secret under one set of patterns, remembered per key.

    Every rendered job asks this of each of its env keys, and jobs share their keys
    (`EPOCHS`, `HF_TOKEN`): a dict hit, where a case-insensitive match of the patterns
    cost about a microsecond a key.
    """

    _REMEMBERED = 4096  # keys; past that the memory starts again (a key is a few bytes)

    def __init__(self, patterns: tuple[str, ...]) -> None:
        joined = "|".join(fnmatch.translate(p) for p in patterns)
        self._match = re.compile(joined, re.IGNORECASE).match
        self._known: dict[str, bool] = {}

    def __call__(self, key: str) -> bool:
        secret = self._known.get(key)
        if secret is None:
            if len(self._known) >= self._REMEMBERED:
                self._known.clear()
            secret = self._known[key] = self._match(key) is not None
        return secret


@functools.lru_cache(maxsize=1024)  # one entry per distinct set of a project's patterns
def _secrecy(patterns: tuple[str, ...]) -> _Secrecy:
    return _Secrecy(patterns)


def secret_keys(env: Mapping[str, str], patterns: Iterable[str]) -> list[str]:
    """The keys of `env` that `patterns` mark secret, in env's order."""
    if not env:
        return []
    secret = _secrecy(tuple(patterns))
    return [key for key in env if secret(key)]


def mask_env(env: dict[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """`env` with each secret value replaced by MASK; `env` itself when none needs it."""
    hidden = [key for key in secret_keys(env, patterns) if env[key] != MASK]
    if not hidden:
        return env
    return env | dict.fromkeys(hidden, MASK)


def mask_job(job: Job, patterns: Iterable[str] | None = None, *, notify: bool = True) -> Job:
    """`job` as anyone but its worker reads it: its secret env values masked, and the
    URL and secret of each `notify` target (unless `notify` is False: what a job keeps
    when it ends, since its end is what it notifies).

    `patterns` default to the job's own (`patterns_of`). Returns `job` itself when it
    holds no secret value, else a copy sharing everything but the spec.
    """
    spec = job.spec
    update: dict[str, object] = {}
    if spec.env:
        masked = mask_env(spec.env, patterns_of(job) if patterns is None else patterns)
        if masked is not spec.env:
            update["env"] = masked
    if notify and spec.notify and any(t.url != MASK for t in spec.notify):
        update["notify"] = [
            t.model_copy(update={"url": MASK, "secret": t.secret and MASK}) for t in spec.notify
        ]
    if not update:
        return job
    return job.model_copy(update={"spec": spec.model_copy(update=update)})


def masked_keys(job: Job) -> list[str]:
    """The env keys of `job` that are secret (its effective patterns) and hold MASK, not a
    value: what a masked read handed on, or a finished job kept."""
    env = job.spec.env
    return [key for key in secret_keys(env, patterns_of(job)) if env[key] == MASK]


def holds_secrets(job: Job) -> bool:
    """True when some secret env value of `job` is a real value, not MASK."""
    return mask_job(job) is not job

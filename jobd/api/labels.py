"""Worker labels and what a job's selector asks of them, as Kubernetes has node labels.

A worker carries labels (`gpu=a100`, `site=lab2`, and the detected `arch`, `os`,
`gpu.model`: daemon/inventory.py); a job's `node_selector` asks for equal values, and its
`node_affinity` for `In`, `NotIn`, `Exists`, `DoesNotExist` (Kubernetes' matchExpressions,
all of which must hold). Keys and values follow Kubernetes' label syntax, so a selector
written for a cluster reads the same here: a key is an optional DNS prefix and `/`, then
a name of letters, digits, `-`, `_`, `.`; a value is such a name or empty. No NUL, no
`=`, no space can slip into either, which would break `--label K=V` and the selectors.

Standard library only: `jobd worker` checks its `--label` before pydantic is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "LABEL_KEY_PATTERN",
    "LABEL_VALUE_PATTERN",
    "MAX_KEY_LENGTH",
    "MAX_VALUE_LENGTH",
    "OPERATORS",
    "check_label_key",
    "check_label_value",
    "expression_holds",
    "parse_label",
]

MAX_KEY_LENGTH = 317  # a 253-character prefix, `/`, a 63-character name
MAX_VALUE_LENGTH = 63
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
LABEL_KEY_PATTERN = rf"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?{_NAME}$"
LABEL_VALUE_PATTERN = rf"^({_NAME})?$"
_KEY = re.compile(LABEL_KEY_PATTERN)
_VALUE = re.compile(LABEL_VALUE_PATTERN)
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def check_label_key(key: str) -> str:
    """`key` if it is a label key; ValueError saying why not."""
    if len(key) > MAX_KEY_LENGTH or not _KEY.fullmatch(key):
        raise ValueError(
            f"{key!r} is not a label key: letters, digits, '-', '_', '.' (and an optional "
            f"'prefix/'), starting and ending with a letter or digit, at most {MAX_KEY_LENGTH}"
        )
    return key


def check_label_value(key: str, value: str) -> str:
    """`value` if it is a label value; ValueError naming the key when not."""
    if len(value) > MAX_VALUE_LENGTH or not _VALUE.fullmatch(value):
        raise ValueError(
            f"{key}: {value!r} is not a label value: letters, digits, '-', '_', '.', "
            f"starting and ending with a letter or digit, at most {MAX_VALUE_LENGTH}"
        )
    return value


def parse_label(text: str) -> tuple[str, str]:
    """`K=V` as a checked (key, value); ValueError when it is not one."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r} is not a label: KEY=VALUE")
    key, value = key.strip(), value.strip()
    return check_label_key(key), check_label_value(key, value)


def expression_holds(
    labels: Mapping[str, str], key: str, operator: str, values: Iterable[str]
) -> bool:
    """Whether `labels` meet one matchExpression (a NotIn holds where the key is absent,
    as in Kubernetes)."""
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    inside = key in labels and labels[key] in values
    return inside if operator == "In" else not inside

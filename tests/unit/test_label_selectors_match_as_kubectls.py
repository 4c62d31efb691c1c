"""`-l` selectors: kubectl's equality and existence requirements, all of which must hold."""

from __future__ import annotations

import re

import pytest

from jobd.api.selectors import SELECTOR_PATTERN, parse_selector

LABELS = {"team": "vision", "tier": "batch", "owner": "ana"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("team=vision", True),
        ("team==vision", True),
        ("team=nlp", False),
        ("team!=nlp", True),
        ("team!=vision", False),
        ("gone!=x", True),  # an absent key is not equal to x
        ("owner", True),
        ("gone", False),
        ("!gone", True),
        ("!owner", False),
        ("team=vision,tier=batch", True),
        ("team=vision, tier=online", False),
        ("team=", False),  # an empty value is a value
    ],
)
def test_a_selector_matches_labels_as_kubectl_does(selector: str, matches: bool) -> None:
    assert parse_selector(selector).matches(LABELS) is matches


def test_no_labels_match_only_absence_requirements() -> None:
    assert parse_selector("!team").matches(None)
    assert not parse_selector("team=vision").matches({})


@pytest.mark.parametrize("selector", ["", " , ", "team=vision,,tier=x", "=vision", "!", "a b=c"])
def test_what_is_no_selector_is_refused_in_a_sentence(selector: str) -> None:
    with pytest.raises(ValueError, match=r"selector|requirement|label key"):
        parse_selector(selector)


@pytest.mark.parametrize(
    "selector", ["team=vision", "a b=c", "", "=x", "!", "a=b!=c", " !x , y = z ", "a\x1cb", "k=="]
)
def test_the_schemas_pattern_takes_exactly_what_the_parser_takes(selector: str) -> None:
    try:
        parse_selector(selector)
        parsed = True
    except ValueError:
        parsed = False

    assert (re.fullmatch(SELECTOR_PATTERN.strip("^$"), selector) is not None) is parsed

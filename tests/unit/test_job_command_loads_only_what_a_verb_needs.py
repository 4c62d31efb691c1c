"""`job` starts fast because it imports only what the verb run needs.

Checked in fresh interpreters, by what lands in sys.modules (structure, not timing):
importing the command loads none of pydantic, rich, httpx or ruamel.yaml; nor does `job
get`, run to the end against a broker that is not there; `job --help` lists every verb
(as click would, from the verbs themselves) without loading any verb's module; `job get`
makes no dataclass; `jobd`'s entry point loads none of the broker's or worker's libraries.
"""

from __future__ import annotations

import copy
import importlib
import json
import subprocess
import sys

import click
import pytest

from jobd.cli.job_main import VERB_MODULES, cli

HEAVY = ("pydantic", "rich", "httpx", "ruamel", "sqlalchemy", "fastapi", "uvicorn")

PROBE = """
import json, sys
{setup}
print(json.dumps(sorted(k for k, v in sys.modules.items() if v is not None)))
"""


def _loaded(setup: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup)],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def _heavy(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules} & set(HEAVY)


def test_importing_the_job_command_loads_no_heavy_library() -> None:
    loaded = _loaded("import jobd.cli.job_main")
    assert "jobd.cli.job_main" in loaded
    assert _heavy(loaded) == set()
    assert not {"jobd.api.models", "jobd.cli.broker_client", "jobd.cli.render"} & loaded


def test_job_get_loads_no_heavy_library() -> None:
    setup = (
        "from jobd.cli.job_main import main\n"
        "sys.argv = ['job', '--server', 'http://127.0.0.1:9', 'get']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 1, exc.code\n"
    )
    loaded = _loaded(setup)
    # It ran, and reached for the broker through the standard library's client
    # (tests/e2e/test_job_speaks_plain_http_with_the_standard_library.py shows a table so).
    assert {"jobd.cli.reading", "jobd.cli.plain_http"} <= loaded
    assert _heavy(loaded) == set()
    # Nor a dataclass (each compiles its methods at import: jobd/api/frozen.py), nor the
    # idna codec's tables for an ASCII host name (plain_http._Connection).
    assert not {"dataclasses", "encodings.idna"} & loaded


def test_job_help_lists_submit_without_building_its_spec_options() -> None:
    # submit's options for the spec's fields are built from the models (pydantic), late.
    setup = (
        "from jobd.cli.job_main import main\n"
        "sys.argv = ['job', '--help']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
    )
    loaded = _loaded(setup)
    assert _heavy(loaded) == set()
    assert not {"jobd.api.models", "jobd.cli.submit", "socket"} & loaded
    assert not {f"jobd.cli.{module}" for module in VERB_MODULES.values()} & loaded


def test_the_jobd_entry_point_loads_no_heavy_library() -> None:
    loaded = _loaded("import jobd.daemon.main")
    assert _heavy(loaded) == set()


def test_each_lazy_verb_is_in_the_module_the_group_loads_it_from() -> None:
    by_module: dict[str, set[str]] = {}
    for verb, module in VERB_MODULES.items():
        by_module.setdefault(module, set()).add(verb)
    for module, verbs in by_module.items():
        found = importlib.import_module(f"jobd.cli.{module}").VERBS
        assert {v.name for v in found} == verbs, module
    ctx = click.Context(cli)
    assert all(cli.get_command(ctx, v) is not None for v in cli.list_commands(ctx))


def _help(group: click.Group, width: int) -> str:
    return click.Context(group, info_name="job", terminal_width=width).get_help()


@pytest.mark.parametrize("width", [50, 80, 120])
def test_job_help_lists_each_verb_as_its_own_help_would(width: int) -> None:
    # The summaries `job --help` shows without loading the verbs' modules must be what click
    # prints from the verbs themselves, so the index cannot go stale.
    indexed = copy.copy(cli)
    indexed.commands = {n: c for n, c in cli.commands.items() if n not in VERB_MODULES}
    for verb in VERB_MODULES:
        assert cli.get_command(click.Context(cli), verb) is not None  # loads its module
    clicks = copy.copy(cli)
    clicks.__class__ = click.Group  # click's own listing, from the loaded verbs
    assert set(clicks.commands) == set(indexed.list_commands(click.Context(indexed)))
    assert _help(indexed, width) == _help(clicks, width)
    assert "get               List jobs" in _help(indexed, width)

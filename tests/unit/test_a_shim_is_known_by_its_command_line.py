"""A shim of a job's own whose record is lost is found by its command line: the one this
release starts (`python -I -S -c BOOTSTRAP JOBD_HOME STATE_DIR`) and the `-m MODULE
STATE_DIR` of releases before it, never a shim of another state directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jobd.worker.shim.client.handle import is_shim_command
from jobd.worker.shim.client.pool import serve_command
from jobd.worker.shim.client.starting import shim_command
from jobd.worker.shim.protocol import LEGACY_SHIM_MODULE, SHIM_MODULE

STATE_DIR = Path("/var/lib/jobd/worker/w1/42-1")


def test_this_releases_command_is_known() -> None:
    assert is_shim_command(shim_command(SHIM_MODULE, str(STATE_DIR)), STATE_DIR)


@pytest.mark.parametrize("module", [SHIM_MODULE, LEGACY_SHIM_MODULE])
def test_an_earlier_releases_command_is_known(module: str) -> None:
    assert is_shim_command([sys.executable, "-m", module, str(STATE_DIR)], STATE_DIR)


def test_another_directory_or_process_is_not() -> None:
    other = STATE_DIR.with_name("43-1")
    assert not is_shim_command(shim_command(SHIM_MODULE, str(other)), STATE_DIR)
    assert not is_shim_command(serve_command(), STATE_DIR)  # a serving shim: by its record
    assert not is_shim_command(["sleep", str(STATE_DIR)], STATE_DIR)
    assert not is_shim_command([], STATE_DIR)


def test_the_shim_is_started_isolated() -> None:
    argv = shim_command(SHIM_MODULE, str(STATE_DIR))
    assert argv[:4] == [sys.executable, "-I", "-S", "-c"] and argv[-1] == str(STATE_DIR)

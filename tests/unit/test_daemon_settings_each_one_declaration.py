"""Each daemon setting is one declaration (jobd/daemon/settings.py), and every one of them
is read flag > env > default (CONTRACT.md §2), in every command that takes it."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
import pytest
from click.testing import CliRunner

from jobd.daemon.main import cli
from jobd.daemon.settings import (
    AgentConnection,
    BrokerOptions,
    OutputOptions,
    WorkerOptions,
    options,
    read,
)

GROUPS = (BrokerOptions, AgentConnection, WorkerOptions, OutputOptions)

# The settings of CONTRACT.md §2 the daemons have today: env var -> flag.
CONTRACT = {
    "JOBD_URL": "--server",
    "JOBD_TOKEN": "--token",
    "JOBD_HOST": "--host",
    "JOBD_PORT": "--port",
    "JOBD_DATA_DIR": "--data-dir",
    "JOBD_DB": "--db",
    "JOBD_LOG_DIR": "--log-dir",
    "JOBD_PROJECTS": "--projects",
    "JOBD_AUTO_PREEMPT_QUEUED_SECONDS": "--auto-preempt-queued",
    "JOBD_AUTO_PREEMPT_MIN_RUNTIME_SECONDS": "--auto-preempt-min-runtime",
    "JOBD_SWEEP_INTERVAL_SECONDS": "--sweep-interval",
    "JOBD_WORKER_NAME": "--name",
    "JOBD_WORKER_SLOTS": "--slots",
    "JOBD_WORKER_GPUS": "--gpus",
    "JOBD_WORKER_CPUS": "--cpus",
    "JOBD_WORKER_MEMORY": "--memory",
    "JOBD_WORKER_LABELS": "--label",
    "JOBD_WORKER_MOUNT_ROOTS": "--mount-root",
    "JOBD_WORKER_ADVERTISE_ADDRESS": "--advertise-address",
    "JOBD_WORKER_CHECKPOINT_ROOT": "--checkpoint-root",
    "JOBD_WORKER_DEFAULT_GRACE_S": "--default-grace",
    "JOBD_TOKEN_FILE": "--token-file",
    "JOBD_MAX_LOG_BYTES": "--max-log-bytes",
    "JOBD_FINISHED_JOB_TTL_S": "--finished-job-ttl",
    "JOBD_EVENTS_MAX_BYTES": "--events-max-bytes",
    "JOBD_WEBHOOK": "--webhook",
    "JOBD_SOCKET": "--socket",
    "JOBD_ADMIN_GROUP": "--admin-group",
}

# A value each setting accepts, as typed, and what it becomes; a second one for the env.
SAMPLES: dict[str, tuple[str, Any, str, Any]] = {
    "--port": ("9000", 9000, "9001", 9001),
    "--max-log-bytes": ("8192", 8192, "9000", 9000),
    "--auto-preempt-queued": ("1.5", 1.5, "2.5", 2.5),
    "--auto-preempt-min-runtime": ("1.5", 1.5, "2.5", 2.5),
    "--sweep-interval": ("1.5", 1.5, "2.5", 2.5),
    "--lost-timeout": ("1.5", 1.5, "2.5", 2.5),
    "--finished-job-ttl": ("10m", 600.0, "2h", 7200.0),
    "--fairshare-half-life": ("7d", 604800.0, "90", 90.0),
    "--fairshare-cpu-weight": ("0.5", 0.5, "2", 2.0),
    "--fairshare-memory-weight": ("0.25", 0.25, "0.5", 0.5),
    "--slots": ("2", 2, "3", 3),
    "--gpus": ("0,1", {0: None, 1: None}, "2", {2: None}),
    "--default-grace": ("5", 5.0, "6", 6.0),
    "--remove-checkpoints-after-days": ("1", 1.0, "2", 2.0),
    "--lease": ("20", 20.0, "30", 30.0),
    "--leader-lease": ("4", 4.0, "30", 30.0),
    "--leader-renew-deadline": ("3", 3.0, "20", 20.0),
    "--leader-retry-period": ("0.5", 0.5, "2", 2.0),
    "--name": ("Box-A", "box-a", "box-b", "box-b"),
    "--http-head-timeout": ("2.5", 2.5, "3", 3.0),
    "--max-client-connections": ("1", 1, "64", 64),
    "--fd-reserve": ("100", 100, "200", 200),
    "--events-max-bytes": ("1", 1, "4096", 4096),
    "--events-keep": ("1", 1, "9", 9),
    "--webhook": ("http://a/x", ("http://a/x",), "http://b/y", ("http://b/y",)),
    "--webhook-format": ("slack", "slack", "discord", "discord"),
    "--webhook-timeout": ("2.5", 2.5, "3", 3.0),
    "--webhook-backoff": ("0.5", 0.5, "2", 2.0),
    "--webhook-backoff-max": ("5", 5.0, "60", 60.0),
    "--webhook-queue": ("10", 10, "20", 20),
    "--cpus": ("7.5", 7.5, "3", 3.0),
    "--memory": ("64GiB", 64 << 30, "512M", 512 << 20),
    "--reserve-cpus": ("0.5", 0.5, "2", 2.0),
    "--reserve-memory": ("1GiB", 1 << 30, "4096", 4096),
    "--label": (
        "gpu=a100",
        (("gpu", "a100"),),
        "gpu=h100,site=lab2",
        (("gpu", "h100"), ("site", "lab2")),
    ),
    "--mount-root": ("/data", ("/data",), "/data:/scratch/", ("/data", "/scratch")),
    "--allow-user": ("alice", ("alice",), "carol,bob", ("bob", "carol")),
    "--memory-enforcement": ("rss", "rss", "cgroup", "cgroup"),
    "--advertise-address": ("127.0.0.2", "127.0.0.2", "gpu1.lab", "gpu1.lab"),
}


def _declared() -> list[tuple[type, dataclasses.Field[Any]]]:
    return [(g, f) for g in GROUPS for f in dataclasses.fields(g)]


def _how(field: dataclasses.Field[Any]) -> Any:
    return field.metadata["jobd.setting"]


def _given(group: type, args: list[str], env: dict[str, str | None]) -> Any:
    seen: list[Any] = []

    @click.command()
    @options(group)
    def probe(**given: Any) -> None:
        seen.append(read(group, given))

    result = CliRunner().invoke(probe, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return seen[0]


def test_every_contract_setting_the_daemons_have_is_declared() -> None:
    declared = {_how(f).env: _how(f).flag for _, f in _declared()}
    assert {env: declared.get(env) for env in CONTRACT} == CONTRACT


@pytest.mark.parametrize(
    ("group", "field"), _declared(), ids=lambda x: getattr(x, "name", getattr(x, "__name__", ""))
)
def test_a_setting_is_read_flag_then_env_then_default(
    group: type, field: dataclasses.Field[Any], tmp_path: Any
) -> None:
    how = _how(field)
    unset: dict[str, str | None] = {_how(f).env: None for f in dataclasses.fields(group)}
    if how.is_flag:
        assert getattr(_given(group, [how.flag], {**unset, how.env: "0"}), field.name) is True
        assert getattr(_given(group, [], {**unset, how.env: "1"}), field.name) is True
        assert getattr(_given(group, [], unset), field.name) is False
        return
    flag_text, flag_value, env_text, env_value = SAMPLES.get(
        how.flag, (str(tmp_path / "a"), None, str(tmp_path / "b"), None)
    )
    both = _given(group, [how.flag, flag_text], {**unset, how.env: env_text})
    env_only = _given(group, [], {**unset, how.env: env_text})
    assert _plain(getattr(both, field.name)) == _plain(flag_value or flag_text)
    assert _plain(getattr(env_only, field.name)) == _plain(env_value or env_text)
    default = _given(group, [], unset)
    if not callable(field.default):
        assert getattr(default, field.name) == field.default


def _plain(value: Any) -> Any:
    return str(value) if hasattr(value, "__fspath__") else value


def test_dev_takes_the_broker_and_the_worker_settings_together() -> None:
    dev = cli.commands["dev"]
    flags = {o for p in dev.params for o in p.opts}
    for group in (BrokerOptions, WorkerOptions, OutputOptions):
        assert {_how(f).flag for f in dataclasses.fields(group)} <= flags

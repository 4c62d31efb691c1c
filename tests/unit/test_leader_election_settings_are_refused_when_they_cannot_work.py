"""The election's settings: Kubernetes' defaults, refused (naming the flag) when they
cannot work together, and the URL a standby sends clients to."""

from __future__ import annotations

import dataclasses

import click
import pytest

from jobd.broker.leadership import LeaderTimings
from jobd.daemon.broker_process import advertise_url, leader_timings
from jobd.daemon.settings import BrokerOptions


def _options(**given: object) -> BrokerOptions:
    defaults = {f.name: f.default for f in dataclasses.fields(BrokerOptions)}
    return BrokerOptions(**(defaults | given))  # type: ignore[arg-type]


def test_the_defaults_are_kubernetes_recommended_ones() -> None:
    assert leader_timings(_options()) == LeaderTimings(15.0, 10.0, 2.0)


@pytest.mark.parametrize(
    ("given", "flag"),
    [
        ({"leader_lease": 10.0}, "--leader-lease"),  # not longer than the renew deadline
        ({"leader_renew_deadline": 2.0}, "--leader-renew-deadline"),  # not past the retry
        ({"leader_retry_period": 12.0}, "--leader-renew-deadline"),
    ],
)
def test_timings_that_cannot_work_are_refused_naming_the_flag(
    given: dict[str, float], flag: str
) -> None:
    with pytest.raises(click.BadParameter) as refused:
        leader_timings(_options(**given))
    assert refused.value.param_hint == flag


def test_the_advertised_url_is_the_bind_unless_given() -> None:
    assert advertise_url(_options(host="10.0.0.5", port=9000)) == "http://10.0.0.5:9000"
    assert advertise_url(_options(host="::1", port=9000)) == "http://[::1]:9000"
    wildcard = advertise_url(_options(host="0.0.0.0", port=9000))
    assert not wildcard.startswith("http://0.0.0.0") and wildcard.endswith(":9000")
    given = _options(advertise_url="https://broker-a.lab:8765/")
    assert advertise_url(given) == "https://broker-a.lab:8765"


@pytest.mark.parametrize("url", ["broker-a:8765", "http://a:1/path", "ftp://a", "http://a b"])
def test_an_advertised_url_that_is_no_base_url_is_refused(url: str) -> None:
    with pytest.raises(click.BadParameter) as refused:
        advertise_url(_options(advertise_url=url))
    assert refused.value.param_hint == "--advertise-url"

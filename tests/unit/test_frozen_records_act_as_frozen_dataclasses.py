"""`Frozen` records (the wire's answers and routes, the `job` command's records) act as the
frozen dataclasses they replaced: built positionally or by keyword, equal only to a record
of the same class and fields, hashed and shown by their fields, copied and pickled, and
never changed."""

from __future__ import annotations

import copy
import pickle
from dataclasses import FrozenInstanceError, dataclass

import pytest

from jobd.api.frozen import Frozen
from jobd.api.selectors import Requirement
from jobd.wire import routes
from jobd.wire.answers import JobList, ReportResult, WatchChange


class Pair(Frozen):
    key: str
    count: int

    def __init__(self, key: str, count: int = 0) -> None:
        self._set(key=key, count=count)


@dataclass(frozen=True)
class PairDataclass:  # what Pair stands for
    key: str
    count: int = 0


def test_a_record_reads_and_compares_as_the_dataclass_would() -> None:
    pair, same, other = Pair("a", 1), Pair(key="a", count=1), Pair("a")
    assert (pair.key, pair.count, other.count) == ("a", 1, 0)
    assert pair == same and pair != other
    assert hash(pair) == hash(same) == hash(("a", 1))
    assert (
        repr(pair)
        == repr(PairDataclass("a", 1)).replace("PairDataclass", "Pair")
        == "Pair(key='a', count=1)"
    )
    assert len({pair, same, other}) == 2


def test_a_record_equals_no_other_class_with_the_same_fields() -> None:
    class Twin(Pair):
        pass

    assert Pair("a", 1) != Twin("a", 1)
    assert Pair("a", 1) != ("a", 1)
    assert PairDataclass("a", 1) != ("a", 1)  # as the dataclass: not a tuple


@pytest.mark.parametrize(
    "record", [Pair("a", 1), JobList([], 3), routes.GET_JOB, Requirement("k", "=")]
)
def test_no_field_of_a_record_can_be_changed_or_removed(record: Frozen) -> None:
    name = next(iter(vars(record)))
    with pytest.raises(AttributeError, match=f"cannot assign to field '{name}'"):
        setattr(record, name, None)
    with pytest.raises(AttributeError, match=f"cannot delete field '{name}'"):
        delattr(record, name)
    with pytest.raises(AttributeError):
        record.unheard_of = 1  # type: ignore[attr-defined]
    # The dataclass refuses the same, with an AttributeError of its own.
    with pytest.raises(FrozenInstanceError):
        PairDataclass("a").key = "b"  # type: ignore[misc]


def test_a_record_is_copied_and_pickled_as_the_dataclass_was() -> None:
    listed = JobList([{"metadata": {"id": 1}}], 3)
    for again in (copy.copy(listed), copy.deepcopy(listed), pickle.loads(pickle.dumps(listed))):
        assert again == listed and again is not listed
    assert pickle.loads(pickle.dumps(routes.GET_JOB)) == routes.GET_JOB


def test_the_wire_answers_keep_their_fields_and_defaults() -> None:
    assert ReportResult(7, 200) == ReportResult(job=7, status=200, phase=None, detail=None)
    change = WatchChange(5, "Job", "ADDED", {"metadata": {"id": 1}})
    assert list(vars(change)) == ["revision", "kind", "op", "object"]
    assert repr(JobList([], 3)) == "JobList(items=[], revision=3)"
    assert (
        routes.GET_JOB.url(job_id=7) == "/jobs/7" and routes.GET_JOB.max_body == routes.SMALL_BODY
    )

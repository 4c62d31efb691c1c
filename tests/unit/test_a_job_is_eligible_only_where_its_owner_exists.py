"""Eligibility by owner (controllers/eligibility.py) and placement's words for it, as pure
functions: a job of no owner runs anywhere, a worker publishing no list takes any owner,
and a job whose owner no worker knows is said Unschedulable naming each refusal; where
some worker knows the owner, only those count for the rest of the verdict.
"""

from __future__ import annotations

from jobd.api.models import JobSpec, Resources
from jobd.controllers.eligibility import knows_owner, owner_refusal
from jobd.controllers.placement import Shape, placement_message


def test_who_is_known_where() -> None:
    assert knows_owner(None, frozenset())  # no owner: anywhere, even where no one is
    assert knows_owner("carol", None)  # no list published: any owner
    assert knows_owner("alice", frozenset({"alice"}))
    assert not knows_owner("carol", frozenset({"alice"}))
    assert owner_refusal("carol", ["alice"]) == "user carol does not exist on this host"
    assert owner_refusal("alice", ["alice"]) is None


def test_placement_names_each_refusal_and_judges_the_rest_among_who_knows() -> None:
    a = Shape(4, (), name="a", users=frozenset({"alice"}))
    b = Shape(4, (24 << 30,), name="b", users=frozenset({"bob"}))
    spec = JobSpec(command=["true"])
    assert placement_message(spec, {a, b}, owner="carol") == (
        "no worker may run it (a: user carol does not exist on this host; "
        "b: user carol does not exist on this host)"
    )
    assert placement_message(spec, {a, b}, owner="alice") is None
    assert placement_message(spec, {a, b}) is None
    gpu = JobSpec(command=["true"], resources=Resources(gpus=1))
    assert placement_message(gpu, {a, b}, owner="bob") is None
    # alice exists only where there is no GPU: the GPU verdict is judged on `a` alone.
    assert placement_message(gpu, {a, b}, owner="alice") == (
        "no worker has 1 GPU; the largest has 0"
    )

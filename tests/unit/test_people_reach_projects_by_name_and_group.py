"""Which projects a person reaches, and who is an admin (broker/auth/people.py), in memory."""

from __future__ import annotations

import pytest

from jobd.api.models import ObjectMeta, Project, ProjectSpec
from jobd.broker.auth.people import Account, NotAPerson, People
from jobd.broker.auth.tokens import WORKER, Principal


def _projects() -> dict[str, Project]:
    specs = {
        "nlp": ProjectSpec(members=["alice"]),
        "vision": ProjectSpec(members=["@ml-lab"], admins=["carol"]),
        "ops": ProjectSpec(admins=["@ops"]),
        "closed": ProjectSpec(),
    }
    return {n: Project(metadata=ObjectMeta(name=n), spec=s) for n, s in specs.items()}


def test_members_by_name_and_by_group_admins_by_either() -> None:
    people = People(_projects())
    assert people.reach(Account("alice", 1001, ("alice",))) == ({"nlp"}, set())
    assert people.reach(Account("bob", 1002, ("ml-lab",))) == ({"vision"}, set())
    assert people.reach(Account("carol", None)) == ({"vision"}, {"vision"})
    assert people.reach(Account("dave", 1004, ("ops",))) == ({"ops"}, {"ops"})
    # A group is named with its @: a user called like a group is not its member.
    assert people.reach(Account("ml-lab", 1005, ())) == (set(), set())


def test_root_and_the_admin_group_are_admins() -> None:
    people = People(_projects(), admin_group="wheel")
    assert people.is_admin(Account("root", 0))
    assert people.is_admin(Account("erin", 1006, ("wheel",)))
    assert not people.is_admin(Account("alice", 1001, ("alice",)))
    assert not People(_projects()).is_admin(Account("erin", 1006, ("wheel",)))


def test_a_worker_vouches_for_no_root_name() -> None:
    people = People(_projects())
    worker = Principal("w1-token", WORKER, worker="w1")
    with pytest.raises(NotAPerson, match="may not vouch for root"):
        people.vouched(worker, "root")
    who = people.vouched(worker, "carol")  # unknown on this host: by name only
    assert (who.user, who.via, who.projects, who.token) == ("carol", "vouched", {"vision"}, worker)

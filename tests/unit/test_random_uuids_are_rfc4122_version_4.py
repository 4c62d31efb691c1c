"""The store's batch of uids reads as uuid.uuid4() would write them."""

from __future__ import annotations

import uuid

from jobd.store.sql import random_uuids


def test_each_is_a_version_4_rfc_4122_uuid_in_canonical_text() -> None:
    uids = random_uuids(2000)
    for text in uids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    assert len(set(uids)) == 2000


def test_none_asked_none_given() -> None:
    assert random_uuids(0) == []

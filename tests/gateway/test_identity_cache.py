"""The authenticator answers from its caches what floods ask again and again, absent namespaces included."""

from __future__ import annotations

import base64

import pytest

from owx.gateway.errors import ApiError
from owx.gateway.identity import Authenticator
from owx.gateway.stores.sqlite import SQLiteEntityStore


class CountedListing(SQLiteEntityStore):
    """The real store, counting how often every key is read."""

    listings = 0

    def list(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.listings += 1
        return super().list(*args, **kwargs)


def test_a_flood_of_web_requests_to_a_missing_namespace_reads_the_keys_once(tmp_path) -> None:
    store = CountedListing(tmp_path / "owx.db")
    try:
        auth = Authenticator(store)
        auth.ensure_namespace("present")
        assert all(auth.owner("absent") is None for _ in range(200))
        assert store.listings == 2  # ensure_namespace's own look-up, and one for the absent name
        assert auth.owner_cached("absent") is None and auth.owner_cached("present") is None  # not looked up yet
        owner = auth.owner("present")
        assert owner is not None and auth.owner_cached("present") == owner
    finally:
        store.close()


def test_a_namespace_created_after_it_was_asked_for_is_found_at_once(tmp_path) -> None:
    store = SQLiteEntityStore(tmp_path / "owx.db")
    try:
        auth = Authenticator(store)
        assert auth.owner("late") is None
        created = auth.ensure_namespace("late")
        assert auth.owner("late") == created  # not the absence remembered a moment ago
    finally:
        store.close()


class CountedReads(SQLiteEntityStore):
    """The real store, counting how often one entity is read."""

    reads = 0

    def get(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().get(*args, **kwargs)


def _basic(auth: str) -> str:
    return "Basic " + base64.b64encode(auth.encode()).decode()


def test_a_flood_of_one_made_up_key_reads_the_store_once_and_is_refused_without_it(tmp_path) -> None:
    store = CountedReads(tmp_path / "owx.db")
    try:
        auth = Authenticator(store)
        store.reads = 0  # the key-signing secret was read at the start
        made_up = _basic("made-up-uuid:secret")
        assert auth.identify_cached(made_up) is None  # not seen yet: the store must say
        for _ in range(200):
            with pytest.raises(ApiError) as refused:
                auth.identify(made_up)
            assert refused.value.status == 401
        assert store.reads == 1
        with pytest.raises(ApiError):
            auth.identify_cached(made_up)  # refused on the spot now (the gateway's loop needs no thread)
        created = auth.ensure_namespace("late", "made-up-uuid:secret")  # the same uuid, stored after all
        assert auth.identify(made_up) == created  # not the absence remembered a moment ago
    finally:
        store.close()

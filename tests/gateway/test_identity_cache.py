"""The authenticator answers from its caches what floods ask again and again, absent namespaces included."""

from __future__ import annotations

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

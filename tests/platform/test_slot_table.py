"""The pool's slot table finds an action's containers by key, and stays consistent as stem cells
are made into actions' containers and containers leave."""

from __future__ import annotations

from types import SimpleNamespace

from owx.platform.embedded.slots import Slot, SlotTable


def slot(container_id: str, key: str | None, state: str = "warm") -> Slot:
    return Slot(SimpleNamespace(id=container_id), state, key)  # type: ignore[arg-type]  # only its id is read


def test_an_actions_slots_are_found_by_key_among_other_actions() -> None:
    table = SlotTable()
    mine = [slot(f"m{i}", "guest/a@1") for i in range(3)]
    for s in [*mine, *(slot(f"o{i}", f"other/b{i}@1") for i in range(100)), slot("stem", None, "stem")]:
        table.add(s)
    assert set(table.of("guest/a@1")) == set(mine)
    assert list(table.of("guest/none@1")) == []
    assert len(table.values()) == 104


def test_a_stem_cell_serving_an_action_moves_in_the_index_and_removal_forgets_it() -> None:
    table = SlotTable()
    stem = slot("s", None, "stem")
    table.add(stem)
    table.serve(stem, "guest/a@1")
    assert stem.key == "guest/a@1" and list(table.of("guest/a@1")) == [stem]
    table.serve(stem, "guest/a@2")  # a new revision
    assert list(table.of("guest/a@1")) == [] and list(table.of("guest/a@2")) == [stem]
    assert table.remove("s") is stem and table.remove("s") is None
    assert list(table.of("guest/a@2")) == [] and table.get("s") is None


def test_serving_a_slot_not_in_the_table_only_sets_its_key() -> None:
    table, outside = SlotTable(), slot("x", None, "stem")
    table.serve(outside, "guest/a@1")
    assert outside.key == "guest/a@1" and list(table.of("guest/a@1")) == []

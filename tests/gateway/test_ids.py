"""Activation ids are OpenWhisk's shape, never repeat, and a forked child never repeats its parent's."""

from __future__ import annotations

import os
import re

from owx.gateway.ids import new_id


def test_ids_are_32_hex_digits_and_unique_across_many_pool_refills() -> None:
    ids = [new_id() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_hand_out_its_parents_next_id() -> None:
    new_id()  # the pool holds ids not yet handed out
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(write, new_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    childs = os.read(read, 64).decode()
    os.close(read)
    assert re.fullmatch(r"[0-9a-f]{32}", childs)
    assert childs != new_id()

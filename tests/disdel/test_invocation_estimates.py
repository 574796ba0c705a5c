"""DiSDeL's estimation for ordinary actions, through a real ``owx up`` (embedded platform, cgroups):
an annotated action that runs out of memory or time is raised once and succeeds, the next call gets
limits learned from the first (kept across a gateway restart), and an action without the annotation
keeps its declared limits and OpenWhisk's at-most-once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from owx.bench.gateway_process import GatewayProcess, start_gateway_process
from owx.common.dockerd import ensure_dockerd
from owx.runtimes.image.build import ensure_image

pytestmark = [pytest.mark.root, pytest.mark.slow]

GROW = """
import time

def main(args):
    block = bytearray(int(args.get("mb", 0)) * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(float(args.get("sleep", 0)))
    return {"held": len(block) // (1024 * 1024)}
"""
AUTO = {"key": "disdel", "value": {"memory": "auto", "timeout": "auto"}}


@pytest.fixture()
def gateway(tmp_path) -> Iterator[GatewayProcess]:
    process = start_gateway_process(tmp_path / "gw", env={"OWX_PLATFORM__STEM_CELLS": "0"})
    try:
        yield process
    finally:
        process.stop()


def _create(gateway: GatewayProcess, name: str, memory: int, timeout: int, annotated: bool) -> None:
    body = {"exec": {"kind": "python:3", "code": GROW}, "limits": {"memory": memory, "timeout": timeout},
            "annotations": [AUTO] if annotated else []}
    answer = gateway.session().put(gateway.api(f"actions/{name}?overwrite=true"), json=body)
    assert answer.ok, answer.text


def _invoke(gateway: GatewayProcess, name: str, **args: object) -> dict:
    answer = gateway.session().post(gateway.api(f"actions/{name}?blocking=true"), json=args, timeout=120)
    return answer.json()


def _estimate(record: dict) -> dict | None:
    return next((a["value"] for a in record["annotations"] if a["key"] == "disdel"), None)


def test_an_estimated_action_out_of_memory_is_raised_once_and_then_learned(gateway: GatewayProcess) -> None:
    check_out_of_memory_is_raised_then_learned(gateway)
    gateway.stop()
    gateway.restart()  # what was learned is stored, not held in memory
    third = _invoke(gateway, "grow", mb=150)
    assert third["response"]["success"] and _estimate(third)["attempts"] == 1


def test_an_estimated_action_out_of_time_is_raised_once(gateway: GatewayProcess) -> None:
    check_out_of_time_is_raised(gateway)


def test_a_misspelt_annotation_is_a_400_and_nothing_is_stored(gateway: GatewayProcess) -> None:
    session = gateway.session()
    for value, message in (({"memory": "atuo"}, "memory"), ({"memroy": "auto"}, "memroy"),
                           ({"timeout": True}, "timeout"), ("auto", "must be an object")):
        body = {"exec": {"kind": "python:3", "code": GROW}, "annotations": [{"key": "disdel", "value": value}]}
        answer = session.put(gateway.api("actions/misspelt"), json=body)
        assert answer.status_code == 400 and message in answer.json()["error"], (value, answer.text)
        assert session.get(gateway.api("actions/misspelt")).status_code == 404
    for value in ({"memory": "auto"}, False):
        body = {"exec": {"kind": "python:3", "code": GROW}, "annotations": [{"key": "disdel", "value": value}]}
        assert session.put(gateway.api("actions/spelt?overwrite=true"), json=body).ok


def test_an_action_without_the_annotation_keeps_its_limits_and_at_most_once(gateway: GatewayProcess) -> None:
    check_unannotated_is_at_most_once(gateway)


def check_out_of_memory_is_raised_then_learned(gateway: GatewayProcess) -> None:
    """An annotated action that needs more than its declared 128 MB: raised once, then learned."""
    _create(gateway, "grow", memory=128, timeout=60_000, annotated=True)
    first = _invoke(gateway, "grow", mb=140)
    assert first["response"]["success"], (first["response"], first["annotations"])
    assert first["response"]["result"] == {"held": 140}
    estimate = _estimate(first)
    assert estimate["attempts"] == 2 and estimate["raisedAfter"] == "oom" and estimate["memory"] > 128
    limits = next(a["value"] for a in first["annotations"] if a["key"] == "limits")
    assert limits["memory"] == estimate["memory"] and limits["timeout"] == estimate["timeout"]  # what it ran with

    second = _invoke(gateway, "grow", mb=150)  # same input size class: learned, one attempt
    estimate = _estimate(second)
    assert second["response"]["success"] and estimate["attempts"] == 1 and estimate["learnedFrom"] >= 1
    peak = next(a["value"] for a in first["annotations"] if a["key"] == "memoryPeak")
    assert estimate["memory"] * 1024 * 1024 >= peak  # never under what it measured


def check_out_of_time_is_raised(gateway: GatewayProcess) -> None:
    """An annotated action that needs more than its declared second: raised once."""
    _create(gateway, "slow", memory=128, timeout=1000, annotated=True)
    record = _invoke(gateway, "slow", sleep=1.5)
    assert record["response"]["success"], record["response"]
    estimate = _estimate(record)
    assert estimate["attempts"] == 2 and estimate["raisedAfter"] == "timeout" and estimate["timeout"] >= 2000


def check_unannotated_is_at_most_once(gateway: GatewayProcess) -> None:
    """The same code without the annotation fails once, as declared."""
    _create(gateway, "plain", memory=128, timeout=60_000, annotated=False)
    record = _invoke(gateway, "plain", mb=140)
    assert not record["response"]["success"]
    assert _estimate(record) is None
    listed = gateway.session().get(gateway.api("activations"), params={"name": "plain"}).json()
    assert len(listed) == 1


@pytest.mark.docker
def test_estimates_on_the_docker_platform(tmp_path) -> None:
    """The same on ``--platform docker``: Docker's OOM kill and the runtime's timeout drive the raise."""
    ensure_image("owx/python-runtime:latest", client=ensure_dockerd())
    process = start_gateway_process(tmp_path / "gw", args=["--platform", "docker"],
                                    env={"OWX_PLATFORM__STEM_CELLS": "0"})
    try:
        check_out_of_memory_is_raised_then_learned(process)
        check_out_of_time_is_raised(process)
    finally:
        process.stop()

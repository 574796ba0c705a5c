"""DiSDeL's estimation for every invocation in front of an upstream OpenWhisk: the upstream's records
give the failure (OOM, timeout) and owx's runtime reports the peak; each raised attempt deploys the
action upstream with the new limits."""

from __future__ import annotations

import pytest

from owx.bench.gateway_process import GatewayProcess
from tests.disdel.test_invocation_estimates import (check_out_of_memory_is_raised_then_learned,
                                                    check_out_of_time_is_raised, check_unannotated_is_at_most_once)

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_out_of_memory_is_raised_once_then_learned_upstream(wrapper: GatewayProcess) -> None:
    check_out_of_memory_is_raised_then_learned(wrapper)


def test_out_of_time_is_raised_once_upstream(wrapper: GatewayProcess) -> None:
    check_out_of_time_is_raised(wrapper)


def test_without_the_annotation_at_most_once_upstream(wrapper: GatewayProcess) -> None:
    check_unannotated_is_at_most_once(wrapper)

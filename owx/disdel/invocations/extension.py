"""DiSDeL's estimation for every invocation as a gateway extension."""

from __future__ import annotations

from typing import TYPE_CHECKING

from owx.disdel.invocations.annotation import check_action
from owx.disdel.invocations.history import LimitHistory
from owx.disdel.invocations.runner import EstimatingRunner

if TYPE_CHECKING:
    from owx.gateway.service import Gateway


class EstimationExtension:
    """Actions annotated ``disdel`` (``{"memory": "auto", "timeout": "auto"}``) run through an
    :class:`EstimatingRunner`; the others keep their declared limits and OpenWhisk's at-most-once."""

    name = "disdel"

    def init_app(self, gateway: Gateway) -> None:
        runner = EstimatingRunner(gateway.invoker.runner, LimitHistory(gateway.entities),
                                  lambda: gateway.catalog.limits, gateway.settings.disdel)
        gateway.invoker.route(runner.accepts, runner)
        gateway.catalog.action_checks.append(check_action)

    def close(self) -> None:
        """Nothing runs in the background."""

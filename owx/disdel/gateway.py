"""DiSDeL's view of the gateway: deploy its actions, invoke them, read activation records.

A thin layer over owx's SDK client (the OpenWhisk REST API), so DiSDeL works against
any OpenWhisk-compatible endpoint: the actions are ordinary actions and every
invocation shows in ``wsk activation list``.
"""

from __future__ import annotations

from typing import Any

from owx.disdel.action_bounds import ActionBounds
from owx.gateway.sdk import Client

ACTION_MODULES = {"train": "owx.disdel.actions.train", "aggregate": "owx.disdel.actions.aggregate",
                  "calibrate": "owx.disdel.actions.calibrate"}


def action_code(role: str) -> str:
    """The source of a DiSDeL action: the runtime has owx importable (process runtime and image)."""
    return f"from {ACTION_MODULES[role]} import main  # noqa: F401\n"


class Gateway:
    def __init__(self, client: Client) -> None:
        self.client = client

    @classmethod
    def connect(cls, apihost: str | None = None, auth: str | None = None, namespace: str = "_") -> "Gateway":
        """From explicit values, else ``__OW_API_HOST``/``__OW_API_KEY``, else ``~/.wskprops``."""
        return cls(Client(apihost, auth, namespace))

    def limits(self, fallback_memory_mb: int) -> ActionBounds:
        return ActionBounds.from_api(self.client.api_info(), fallback_memory_mb)

    def deploy(self, name: str, role: str, kind: str, memory_mb: int, timeout_ms: int) -> None:
        self.client.put_action(name, action_code(role), kind=kind, limits={"memory": memory_mb, "timeout": timeout_ms},
                               annotations={"disdel-role": role})

    def run(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """A blocking invocation's activation record (polled past the server's blocking limit)."""
        return self.client.invoke_record(name, params)

    def prime(self, name: str, kind: str, memory_mb: int, timeout_ms: int) -> bool:
        """Load the runtime once in a container of its own (see :mod:`owx.disdel.actions.calibrate`);
        False when that failed (the job goes on: priming only spares its first actions)."""
        self.client.put_action(name, action_code("calibrate"), kind=kind, limits={"memory": memory_mb, "timeout": timeout_ms})
        try:
            record = self.run(name, {"probe": "prime"})
        finally:
            self.delete(name)
        return bool((record.get("response") or {}).get("success"))

    def delete(self, name: str) -> None:
        self.client.delete_action(name)

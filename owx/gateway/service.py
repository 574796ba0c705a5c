"""The gateway's composition root: settings, stores, platform and pipeline, wired once."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from owx.config import Settings
from owx.gateway.catalog import Catalog
from owx.gateway.identity import Authenticator, Identity
from owx.gateway.pipeline.admission import Throttle
from owx.gateway.pipeline.invoke import Invoker, Runner
from owx.gateway.stores import ActivationStore, EntityStore, open_stores

log = logging.getLogger(__name__)

# Packages that extend the gateway: each module has ``install(gateway)``, called once at open.
EXTENSIONS = ("owx.canary.gateway_extension", "owx.escra_agent.gateway_extension")


class Gateway:
    """Everything a request handler needs; one per process."""

    def __init__(self, settings: Settings, entities: EntityStore, activations: ActivationStore, runner: Runner) -> None:
        self.settings = settings
        self.entities = entities
        self.activations = activations
        self.runner = runner
        self.auth = Authenticator(entities)
        self.catalog = Catalog(entities, settings)
        self.throttle = Throttle(settings.invocations_per_minute, settings.concurrent_invocations)
        self.invoker = Invoker(settings, self.catalog, activations, runner, self.throttle)
        self.extensions: dict[str, Any] = {"blueprints": [], "closers": []}

    @classmethod
    def open(cls, settings: Settings) -> "Gateway":
        """Open the configured stores and start the configured platform."""
        from owx.gateway.platform.cluster import Platform

        settings.data_dir.mkdir(parents=True, exist_ok=True)
        entities, activations = open_stores(settings)
        gateway = cls(settings, entities, activations, Platform(settings))
        for module in EXTENSIONS:
            try:
                install = importlib.import_module(module).install
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    raise
                continue
            install(gateway)
        return gateway

    def default_identity(self, auth: str | None = None) -> Identity:
        """The default namespace's identity, created on first start."""
        return self.auth.ensure_namespace(self.settings.default_namespace, auth)

    def close(self) -> None:
        """Finish running invocations, stop the platform, flush and close the stores."""
        self.invoker.close()
        for close_extension in self.extensions["closers"]:
            close_extension()
        close = getattr(self.runner, "close", None)
        if close:
            close()
        self.activations.close()
        self.entities.close()

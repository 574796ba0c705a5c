"""The gateway's composition root: settings, stores, platform, pipeline and extensions, wired once."""

from __future__ import annotations

import logging
from collections.abc import Callable

from flask import Flask

from owx.common.eventloop import EventLoopThread
from owx.gateway import extensions as extension_registry
from owx.gateway.admin.accounts import StoredAccounts
from owx.gateway.catalog import Catalog
from owx.gateway.extensions import Extension
from owx.gateway.identity import Authenticator, Identity
from owx.gateway.metrics import GatewayMetrics
from owx.gateway.models import MB
from owx.gateway.pipeline.admission import Throttle
from owx.gateway.pipeline.invoke import Invoker
from owx.gateway.reactive.service import Reactive
from owx.gateway.stores import ActivationStore, EntityStore, open_stores
from owx.gateway.write_budget import WriteBudget
from owx.platform import Platform, open_platform
from owx.settings import Settings

log = logging.getLogger(__name__)


class Gateway:
    """Everything a request handler needs; one per process. Its event loop serves HTTP, runs warm
    activations and reads containers' output (:mod:`owx.common.eventloop`)."""

    def __init__(self, settings: Settings, entities: EntityStore, activations: ActivationStore,
                 platform: Platform, loop: EventLoopThread) -> None:
        self.settings = settings
        self.entities = entities
        self.activations = activations
        self.platform = platform
        self.loop = loop
        self.auth = Authenticator(entities)
        self.accounts = StoredAccounts(entities, platform.accounts, settings.upstream.accounts, running=True)
        self.catalog = Catalog(entities, settings.limits, platform)
        self.throttle = Throttle(settings.gateway.invocations_per_minute, settings.gateway.concurrent_invocations)
        self.entity_writes = WriteBudget(settings.gateway.entity_write_mb_per_minute * MB)
        self.invoker = Invoker(settings, self.catalog, activations, platform, self.throttle, loop)
        self.reactive = Reactive(self)
        self.metrics: GatewayMetrics | None = None  # made in open(), once the extensions are attached
        self.extensions: dict[str, Extension] = {}
        self.blueprints: list[Callable[[Flask], None]] = []  # extensions' routes, registered by create_app

    @classmethod
    def open(cls, settings: Settings) -> "Gateway":
        """Open the configured stores, start the configured platform and attach the extensions."""
        settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        settings.data_dir.chmod(0o700)  # keys, code and activations: the owner's only
        entities, activations = open_stores(settings)
        loop = EventLoopThread("owx-loop", settings.gateway.busy_poll_us / 1e6)
        try:
            platform = open_platform(settings, loop)
        except BaseException:
            loop.close()
            activations.close()
            entities.close()
            raise
        gateway = cls(settings, entities, activations, platform, loop)
        try:
            for extension in extension_registry.load(settings.extensions):
                extension.init_app(gateway)
                gateway.extensions[extension.name] = extension
            gateway.accounts.apply()
            if settings.gateway.store == "couchdb":  # other gateways may share it and change accounts
                gateway.accounts.follow()
            gateway.metrics = GatewayMetrics(gateway)
            gateway.reactive.start()
            gateway.invoker.recover()
        except BaseException:
            gateway.close()
            raise
        return gateway

    def default_identity(self, auth: str | None = None) -> Identity:
        """The default namespace's identity, created on first start."""
        return self.auth.ensure_namespace(self.settings.gateway.default_namespace, auth)

    def close(self) -> None:
        """Give running activations the shutdown grace (then record them as failed), stop the extensions
        and the platform, flush and close the stores."""
        self.accounts.close()
        self.reactive.close()
        self.invoker.close(self.settings.gateway.shutdown_grace_s)
        for extension in reversed(list(self.extensions.values())):
            extension.close()
        self.platform.close()
        self.loop.close()
        self.activations.close()
        self.entities.close()

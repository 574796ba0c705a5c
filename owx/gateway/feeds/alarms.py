"""The alarms feed: ``/whisk.system/alarms/{alarm,once,interval}`` answered inside the gateway.

The feed actions are real entities of a published package of ``whisk.system``, so ``wsk trigger
create --feed`` and the npm client's ``feeds.create`` invoke them as OpenWhisk's clients do; their
invocations are routed here (``Invoker.route``) instead of to a container. A lifecycle event
(``CREATE``, ``READ``, ``UPDATE``, ``DELETE``) with the caller's ``authKey`` and ``triggerName``
registers, describes, changes or removes the trigger's alarm. Alarms are stored (collection
``feeds.alarms`` of ``whisk.system``), so they survive restarts; each fire uses the stored key, and an
alarm whose trigger or key is gone stops, as OpenWhisk's alarms provider does.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from typing import Any

from owx.gateway.catalog import ResolvedAction
from owx.gateway.errors import ApiError
from owx.gateway.feeds.schedule import Alarm, FeedError, alarm_from, updated
from owx.gateway.feeds.scheduler import AlarmScheduler
from owx.gateway.identity import Authenticator, Identity
from owx.gateway.names import parse_fqn
from owx.gateway.reactive.fire import TriggerFirer
from owx.gateway.stores import Conflict, EntityStore
from owx.platform.types import APPLICATION_ERROR, SUCCESS, ActionSpec, RunOutcome, RunRequest

log = logging.getLogger(__name__)

SYSTEM_NAMESPACE = "whisk.system"
PACKAGE = "alarms"
ALARMS = "feeds.alarms"
FEED_KIND = "owx:feed"
AUTH_FAILED = "Trigger authentication request failed."
MAX_ALARMS_PER_NAMESPACE = 100
TOO_MANY_ALARMS = "the namespace has {count} alarms, the most allowed"
GONE_STATUSES = (401, 403, 404)  # the trigger or its key is gone: the alarm stops for good
TriggerDeleter = Callable[[str, str, bool], None]  # (namespace, trigger, with its rules)

# name -> (description, parameters the action is bound with, documented parameters), as the alarms package.
FEED_ACTIONS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "alarm": ("Fire trigger when alarm occurs", {}, ["cron", "timezone", "startDate", "stopDate", "maxTriggers"]),
    "once": ("Fire trigger once when alarm occurs", {"fireOnce": True}, ["date", "deleteAfterFire"]),
    "interval": ("Fire trigger at specified interval", {"isInterval": True}, ["minutes", "startDate", "stopDate"]),
}


class AlarmFeed:
    """The feed actions' runner, the alarm registry and its scheduler."""

    def __init__(self, entities: EntityStore, auth: Authenticator, firer: TriggerFirer,
                 delete_trigger: TriggerDeleter) -> None:
        self.entities = entities
        self.auth = auth
        self.firer = firer
        self.delete_trigger = delete_trigger
        self.scheduler = AlarmScheduler(self._fire)

    # -- lifecycle of the gateway ----------------------------------------------------------
    def start(self) -> None:
        """Install the package, then schedule every stored alarm."""
        self._install()
        for entity in self.entities.list(SYSTEM_NAMESPACE, ALARMS):
            try:
                alarm = Alarm.model_validate(entity.doc)
            except ValueError as exc:  # a tenant's alarm an older version stored must not stop the gateway
                log.warning("alarm %s is not scheduled: %s", entity.name, exc)
                continue
            self.scheduler.put(alarm)

    def close(self) -> None:
        self.scheduler.close()

    def forget(self, namespace: str, trigger: str) -> None:
        """The trigger was deleted: its alarm stops."""
        key = f"{namespace}/{trigger}"
        self.scheduler.remove(key)
        self.entities.delete(SYSTEM_NAMESPACE, ALARMS, key)

    def scheduled(self) -> int:
        return self.scheduler.scheduled()

    def _install(self) -> None:
        package = {"namespace": SYSTEM_NAMESPACE, "name": PACKAGE, "version": "0.0.1", "publish": True,
                   "binding": {}, "parameters": [],
                   "annotations": [{"key": "description", "value": "Alarms and periodic utility (owx)"}]}
        _ensure(self.entities, "packages", PACKAGE, package)
        for name, (description, bound, documented) in FEED_ACTIONS.items():
            action = {
                "namespace": f"{SYSTEM_NAMESPACE}/{PACKAGE}", "name": name, "version": "0.0.1", "publish": True,
                "exec": {"kind": FEED_KIND, "binary": False},
                "annotations": [{"key": "feed", "value": True}, {"key": "description", "value": description},
                                {"key": "parameters", "value": [{"name": p} for p in documented]},
                                {"key": "exec", "value": FEED_KIND}],
                "parameters": [{"key": k, "value": v} for k, v in bound.items()],
                "limits": {"timeout": 60_000, "memory": 128, "logs": 0, "concurrency": 1},
            }
            _ensure(self.entities, "actions", f"{PACKAGE}/{name}", action)

    # -- the feed actions (Invoker route) -------------------------------------------------------
    @staticmethod
    def accepts(resolved: ResolvedAction) -> bool:
        return resolved.path.namespace == SYSTEM_NAMESPACE and resolved.path.package == PACKAGE

    def run(self, spec: ActionSpec, request: RunRequest) -> RunOutcome:
        """One lifecycle event; an application error with the alarms package's message when refused."""
        start = int(time.time() * 1000)
        try:
            result = self._lifecycle(request.value, request.namespace, start)
            status = SUCCESS
        except FeedError as exc:
            result, status = {"error": str(exc)}, APPLICATION_ERROR
        return RunOutcome(status, result, [], start, int(time.time() * 1000))

    def _lifecycle(self, params: dict[str, Any], caller: str, now_ms: int) -> dict[str, Any]:
        event = str(params.get("lifecycleEvent", "")).upper()
        if event not in ("CREATE", "READ", "UPDATE", "DELETE"):
            raise FeedError("unsupported lifecycleEvent")
        identity, trigger = self._owner(params, caller, must_exist=event != "DELETE")
        key = f"{identity.namespace}/{trigger}"
        if event == "CREATE":
            count = self.entities.count(SYSTEM_NAMESPACE, ALARMS, prefix=f"{identity.namespace}/")
            if count >= MAX_ALARMS_PER_NAMESPACE and self._stored_or_none(key) is None:
                raise FeedError(TOO_MANY_ALARMS.format(count=count))
            self._save(alarm_from(params, identity.namespace, trigger, identity.auth, now_ms))
            return {"status": "success"}
        current = self._stored(key)
        if event == "READ":
            return current.describe()
        if event == "UPDATE":
            self._save(updated(current, params, now_ms))
        else:
            self.forget(identity.namespace, trigger)
        return {"status": "success"}

    def _owner(self, params: dict[str, Any], caller: str, must_exist: bool) -> tuple[Identity, str]:
        """The identity of ``authKey`` and the trigger's name; the key must be the caller's and own the trigger."""
        if not params.get("triggerName"):
            raise FeedError("no trigger name parameter was provided")
        try:
            identity = self.auth.identify(_basic(str(params.get("authKey", ""))))
            trigger = parse_fqn(str(params["triggerName"]), identity.namespace)
        except ApiError:
            raise FeedError(AUTH_FAILED) from None
        if identity.namespace != caller or trigger.namespace != caller or trigger.package is not None:
            raise FeedError(AUTH_FAILED)
        if must_exist and self.firer.triggers.entity(caller, trigger.name) is None:
            raise FeedError(AUTH_FAILED)
        return identity, trigger.name

    def _stored(self, key: str) -> Alarm:
        alarm = self._stored_or_none(key)
        if alarm is None:
            raise FeedError(f"could not find trigger {key} in the database")
        return alarm

    def _stored_or_none(self, key: str) -> Alarm | None:
        entity = self.entities.get(SYSTEM_NAMESPACE, ALARMS, key)
        return Alarm.model_validate(entity.doc) if entity is not None else None

    def _save(self, alarm: Alarm) -> None:
        _replace(self.entities, ALARMS, alarm.key, alarm.model_dump())
        self.scheduler.put(alarm)

    # -- firing ------------------------------------------------------------------------------
    def _fire(self, alarm: Alarm) -> Alarm | None:
        """Fire the trigger; the alarm as it stands afterwards, or None once it is gone for good."""
        try:
            identity = self.auth.identify(_basic(alarm.auth))
            self.firer.fire(identity, alarm.trigger, alarm.payload)
        except ApiError as exc:
            if exc.status in GONE_STATUSES:
                log.info("alarm of %s stops: %s", alarm.key, exc.message)
                self.forget(alarm.namespace, alarm.trigger)
                return None
            log.warning("alarm of %s did not fire: %s", alarm.key, exc.message)
            return alarm
        after = alarm.model_copy(update={"fired": alarm.fired + 1})
        if after.kind == "once":
            return self._fired_once(after)
        if after.max_triggers > 0 and after.fired >= after.max_triggers:
            after = after.model_copy(update={"active": False, "changed_ms": int(time.time() * 1000),
                                             "reason": "Automatically disabled after reaching max triggers"})
        if after.max_triggers > 0:
            _replace(self.entities, ALARMS, after.key, after.model_dump())
        return after

    def _fired_once(self, alarm: Alarm) -> Alarm | None:
        if alarm.delete_after_fire == "false":
            done = alarm.model_copy(update={"active": False, "changed_ms": int(time.time() * 1000),
                                            "reason": "Automatically disabled after firing once"})
            _replace(self.entities, ALARMS, done.key, done.model_dump())
            return done
        self.delete_trigger(alarm.namespace, alarm.trigger, alarm.delete_after_fire == "rules")
        return None


def _basic(auth: str) -> str:
    return "Basic " + base64.b64encode(auth.encode()).decode()


def _ensure(store: EntityStore, collection: str, name: str, doc: dict[str, Any]) -> None:
    current = store.get(SYSTEM_NAMESPACE, collection, name)
    if current is None or current.doc != doc:
        _replace(store, collection, name, doc)


def _replace(store: EntityStore, collection: str, name: str, doc: dict[str, Any]) -> None:
    """Write ``doc`` whatever revision is stored (the feed is the only writer of these documents)."""
    for _ in range(5):
        current = store.get(SYSTEM_NAMESPACE, collection, name)
        try:
            store.put(SYSTEM_NAMESPACE, collection, name, doc, current.rev if current else None)
            return
        except Conflict:
            continue
    raise Conflict(f"{collection} {SYSTEM_NAMESPACE}/{name} keeps changing")

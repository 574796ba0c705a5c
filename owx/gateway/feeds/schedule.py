"""One alarm: what a feed call asked for (validated with the alarms package's own messages) and when
it fires next.

``alarm`` takes ``cron`` (5 fields, or 6 with seconds first as the alarms package's cron library
reads them, so ``* * * * * *`` fires every second), ``timezone``, ``startDate``, ``stopDate`` and
``maxTriggers``; ``once`` takes ``date`` and ``deleteAfterFire`` (false, true, rules); ``interval``
takes ``minutes`` and ``startDate`` (default: 30 s from now), ``stopDate``. Each takes
``trigger_payload``. Dates are epoch milliseconds or ISO 8601 text, before the year 10000. An alarm
that can never fire (a cron of February 30th, a start past the last date) is refused when asked for.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from pydantic import BaseModel, Field

AlarmKind = Literal["cron", "once", "interval"]
INTERVAL_DEFAULT_DELAY_MS = 30_000
LAST_DATE_MS = int(datetime(9999, 12, 31, tzinfo=timezone.utc).timestamp() * 1000)  # what a date may name


class FeedError(ValueError):
    """A feed call the alarms package refuses; the message is its ``{"error"}`` text."""


class Alarm(BaseModel):
    """One trigger's alarm, as stored (collection ``feeds.alarms`` of ``whisk.system``)."""

    namespace: str
    trigger: str
    auth: str = Field(repr=False)  # the key the trigger is fired with, as OpenWhisk's provider keeps it
    kind: AlarmKind
    payload: dict[str, Any] = {}
    cron: str | None = None
    timezone: str | None = None
    date_ms: int | None = None
    minutes: int | None = None
    start_ms: int | None = None
    stop_ms: int | None = None
    max_triggers: int = -1
    delete_after_fire: Literal["false", "true", "rules"] = "false"
    fired: int = 0
    active: bool = True
    changed_ms: int = Field(default_factory=lambda: int(time.time() * 1000))
    reason: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.trigger}"

    def next_fire(self, after_s: float) -> float | None:
        """Epoch seconds of the first fire after ``after_s``, or None when it will not fire again."""
        if not self.active or (self.max_triggers > 0 and self.fired >= self.max_triggers):
            return None
        if self.kind == "once":
            due = self.date_ms / 1000 if self.date_ms is not None and self.fired == 0 else None
            return due if due is not None and due > after_s else None
        start = self.start_ms / 1000 if self.start_ms is not None else None
        base = max(after_s, start - 0.001) if start is not None else after_s
        if self.kind == "interval":
            assert self.minutes and start is not None
            period = self.minutes * 60
            due = start + (int((base - start) // period) + 1) * period if base >= start else start
        else:
            assert self.cron is not None
            zone = ZoneInfo(self.timezone) if self.timezone else timezone.utc
            try:
                due = croniter(self.cron, datetime.fromtimestamp(base, zone),
                               second_at_beginning=_has_seconds(self.cron)).get_next(float)
            except (CroniterError, ValueError, OverflowError, OSError):
                return None  # no such date (February 30th), or none before the year 10000
        if due * 1000 > LAST_DATE_MS:
            return None
        return due if self.stop_ms is None or due * 1000 <= self.stop_ms else None

    def describe(self) -> dict[str, Any]:
        """What a ``READ`` lifecycle event answers (the alarms package's ``config`` and ``status``)."""
        config: dict[str, Any] = {"name": self.trigger, "namespace": self.namespace, "payload": self.payload}
        if self.kind == "once":
            config.update(date=_iso(self.date_ms), deleteAfterFire=self.delete_after_fire)
        else:
            config.update(startDate=_iso(self.start_ms), stopDate=_iso(self.stop_ms))
            config.update({"minutes": self.minutes} if self.kind == "interval" else
                          {"cron": self.cron, "timezone": self.timezone})
        status = {"active": self.active, "dateChanged": self.changed_ms, "dateChangedISO": _iso(self.changed_ms),
                  "reason": self.reason}
        return {"config": config, "status": status}


def alarm_from(params: dict[str, Any], namespace: str, trigger: str, auth: str, now_ms: int) -> Alarm:
    """The alarm a ``CREATE`` asks for; :class:`FeedError` with the alarms package's message if invalid."""
    fields: dict[str, Any] = {"namespace": namespace, "trigger": trigger, "auth": auth,
                              "payload": payload_of(params.get("trigger_payload"))}
    if _truthy(params.get("fireOnce")):
        if not params.get("date"):
            raise FeedError("alarms once trigger feed is missing the date parameter")
        fields.update(kind="once", date_ms=_future_date(params["date"], "date", now_ms))
        fields["delete_after_fire"] = _delete_after_fire(params.get("deleteAfterFire", "false"))
        return Alarm(**fields)
    if _truthy(params.get("isInterval")):
        fields.update(kind="interval", minutes=_minutes(params.get("minutes")))
        if params.get("maxTriggers") and params.get("stopDate"):
            raise FeedError("maxTriggers is not supported for the interval trigger feed")
    else:
        fields.update(kind="cron", cron=_cron(params.get("cron")), timezone=_timezone(params.get("timezone")))
        if params.get("maxTriggers") and params.get("stopDate"):
            raise FeedError("maxTriggers is not allowed when the stopDate parameter is specified")
        fields["max_triggers"] = _max_triggers(params.get("maxTriggers", -1))
    if params.get("startDate"):
        fields["start_ms"] = _future_date(params["startDate"], "startDate", now_ms)
    elif fields["kind"] == "interval":
        fields["start_ms"] = now_ms + INTERVAL_DEFAULT_DELAY_MS
    if params.get("stopDate"):
        fields["stop_ms"] = _future_date(params["stopDate"], "stopDate", now_ms)
        if fields.get("start_ms") is not None and fields["stop_ms"] <= fields["start_ms"]:
            raise FeedError(f"stopDate parameter '{params['stopDate']}' must be greater than the startDate "
                            f"parameter '{params.get('startDate') or _iso(fields['start_ms'])}'")
    return _firing(Alarm(**fields), now_ms)


def _firing(alarm: Alarm, now_ms: int) -> Alarm:
    """``alarm`` if it fires at least once; :class:`FeedError` if it never will."""
    if alarm.next_fire(now_ms / 1000) is None:
        if alarm.stop_ms is not None:
            raise FeedError("the first scheduled trigger fire is not until after the stop date")
        matching = f"no date matches cron pattern '{alarm.cron}'" if alarm.kind == "cron" else "no fire falls"
        raise FeedError(f"the alarm never fires: {matching} before the year 10000")
    return alarm


def updated(alarm: Alarm, params: dict[str, Any], now_ms: int) -> Alarm:
    """The alarm after an ``UPDATE`` (only the parameters its kind has)."""
    changes: dict[str, Any] = {}
    if "trigger_payload" in params:
        changes["payload"] = payload_of(params["trigger_payload"])
    if alarm.kind == "once":
        if params.get("date"):
            changes["date_ms"] = _future_date(params["date"], "date", now_ms)
        if params.get("deleteAfterFire"):
            changes["delete_after_fire"] = _delete_after_fire(params["deleteAfterFire"])
    else:
        if alarm.kind == "interval" and params.get("minutes"):
            changes["minutes"] = _minutes(params["minutes"])
        if alarm.kind == "cron" and params.get("cron"):
            changes["cron"] = _cron(params["cron"])
        if alarm.kind == "cron" and params.get("timezone"):
            changes["timezone"] = _timezone(params["timezone"])
        for name, field in (("startDate", "start_ms"), ("stopDate", "stop_ms")):
            if params.get(name):
                changes[field] = _future_date(params[name], name, now_ms)
    if not changes:
        raise FeedError("no updatable parameters were specified")
    return _firing(alarm.model_copy(update={**changes, "changed_ms": now_ms, "fired": 0, "active": True,
                                            "reason": None}), now_ms)


def payload_of(given: Any) -> dict[str, Any]:
    """``trigger_payload``: an object as it is, text as ``{"payload": text}`` (the alarms package's rule)."""
    if given is None:
        return {}
    if isinstance(given, str):
        return {"payload": given}
    if isinstance(given, dict):
        return given
    raise FeedError("trigger_payload must be an object or a string")


def _has_seconds(cron: str) -> bool:
    return len(cron.split()) == 6


def _cron(cron: Any) -> str:
    if not cron:
        raise FeedError("alarms trigger feed is missing the cron parameter")
    text = str(cron).strip()
    if len(text.split()) not in (5, 6) or not croniter.is_valid(text, second_at_beginning=_has_seconds(text)):
        raise FeedError(f"cron pattern '{cron}' is not valid")
    return text


def _timezone(name: Any) -> str | None:
    if name is None or name == "":
        return None
    try:
        ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise FeedError("Invalid timezone.") from None
    return str(name)


def _minutes(value: Any) -> int:
    if value is None or value == "":
        raise FeedError("interval trigger feed is missing the minutes parameter")
    try:
        minutes = int(str(value))
    except ValueError:
        raise FeedError("the minutes parameter must be an integer") from None
    if minutes <= 0:
        raise FeedError("the minutes parameter must be an integer greater than zero")
    return minutes


def _max_triggers(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise FeedError("the maxTriggers parameter must be an integer") from None


def _delete_after_fire(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in ("false", "true", "rules"):
        raise FeedError("deleteAfterFire parameter must be one of [false, true, rules].")
    return text


def _future_date(value: Any, name: str, now_ms: int) -> int:
    when = _epoch_ms(value)
    if when is None:
        raise FeedError(f"{name} parameter '{value}' is not a valid Date")
    if when <= now_ms:
        raise FeedError(f"{name} parameter '{value}' must be in the future")
    if when > LAST_DATE_MS:
        raise FeedError(f"{name} parameter '{value}' must be before the year 10000")
    return when


def _epoch_ms(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return int((parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def _iso(epoch_ms: int | None) -> str | None:
    if epoch_ms is None:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).isoformat().replace("+00:00", "Z")


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() == "true"

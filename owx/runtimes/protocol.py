"""OpenWhisk's action runtime protocol: ``POST /init`` and ``POST /run`` (stdlib only).

Status codes and messages follow OpenWhisk's runtimes (the Go action loop that
its Python runtime uses, and the older Python action proxy):

=====================================  ======  =============================================
situation                              status  body
=====================================  ======  =============================================
init ok                                200     ``{"ok": true}``
second init                            403     ``Cannot initialize the action more than once.``
init without code                      403     ``Missing main/no code to execute.``
malformed JSON / wrong field types     400     ``Error unmarshaling request: ...``
binary code that is not base64         400     ``cannot decode the request: ...``
syntax/import error, no main, bad zip  502     ``Cannot load the action: ...`` (traceback on stderr)
run before init                        500     ``no action defined yet``
run: value not an object or array      400     ``The action did not receive a dictionary or array as an argument.``
run: dict or list result               200     the result
run: exception                         502     ``<ExceptionType>: <message>`` (traceback on stderr)
run: any other result                  502     ``The action did not return a dictionary or array.``
=====================================  ======  =============================================

Request bodies are checked by hand rather than with pydantic: this module runs
in images that only have the standard library.
After every ``/run``, whatever its outcome, and after a failed init (whose logs
also matter) the sentinel line is written to stdout and stderr, both flushed, once
the answer has been sent (:meth:`ActionProxy.answered`): the platform reads the
answer while the runtime writes them, instead of after.

Behind an upstream OpenWhisk, which hands a runtime nothing per activation but its
input, owx puts what it needs into the input under the reserved key ``__owx``: activation
fields that become ``__OW_*`` variables (the caller's own key and namespace, Canary's function
id and store), ``keep_warm`` (answer at once, run nothing: the container stays warm) and
``report_memory`` (write the container's peak memory as one log line,
``MEMORY_REPORT_PREFIX`` and bytes, before the sentinel).
The runtime honours ``__owx`` only when its ``key`` is the one the deploying gateway gave the
container at ``/init`` (the init parameter ``OPTIONS_KEY_ENV``, kept out of the action's
environment), so a caller who writes its own ``__owx`` into an action's input forges nothing;
the reserved key never reaches the action either way.
"""

from __future__ import annotations

import hmac
import json
import os
import sys
import threading

from .action_loader import ActionLoadError, UndecodableCode, load_action, print_traceback
from .activation_env import activation_env, install, ow_env
from .memory_peak import MemoryPeak

TYPE_CHECKING = False  # typing costs ~4 ms of start-up; only type checkers need it
if TYPE_CHECKING:
    from typing import Any

    from .action_loader import Action

SENTINEL = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"
RESERVED = "__owx"
OPTIONS_KEY_ENV = "__OWX_OPTIONS_KEY"
RESERVED_FIELDS = frozenset({"api_key", "api_host", "namespace", "action_name", "action_version", "activation_id",
                             "transaction_id", "deadline", "canary_function_id", "canary_store", "canary_interval"})
MEMORY_REPORT_PREFIX = "owx.memory-peak-bytes: "

NOT_A_RESULT = "The action did not return a dictionary or array."
NOT_AN_ARGUMENT = "The action did not receive a dictionary or array as an argument."


class BadRequest(Exception):
    """The request body is not what the protocol expects (answered with 400)."""


class ActionProxy:
    """The state of one runtime: at most one initialised action, run any number of times."""

    def __init__(self) -> None:
        self._action: Action | None = None
        self._options_key: str | None = None
        self._init_lock = threading.Lock()
        self._memory_peak = MemoryPeak()
        self._ending = threading.local()  # per connection's thread: the activation whose logs end once answered
        install()

    def answered(self) -> None:
        """The answer to this thread's request is sent, or could not be: end the logs of the activation
        it answered, if it ran one (the sentinels, after the memory report it asked for)."""
        ending = self._ending.__dict__
        if ending.pop("due", False):
            _end_activation(ending.pop("report"))

    def _end_once_answered(self, report: str | None = None) -> None:
        self._ending.due, self._ending.report = True, report

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """Route one HTTP request; returns the status and the JSON body."""
        if path == "/run":
            return self.run(body) if method == "POST" else _error(405, "use POST /run")
        if path == "/init":
            return self.init(body) if method == "POST" else _error(405, "use POST /init")
        return _error(404, f"no route {path}; the runtime serves POST /init and POST /run")

    def init(self, body: bytes) -> tuple[int, bytes]:
        """``POST /init``: load the action once."""
        with self._init_lock:
            if self._action is not None:
                print("Cannot initialize the action more than once.", file=sys.stderr, flush=True)
                return _error(403, "Cannot initialize the action more than once.")
            try:
                value = _init_value(body)
            except BadRequest as error:
                return _error(400, str(error))
            if not value.get("code"):
                return _error(403, "Missing main/no code to execute.")
            try:
                env = dict(value.get("env") or {})
                key = env.pop(OPTIONS_KEY_ENV, None)
                self._options_key = key if isinstance(key, str) and key else None
                _set_init_env(env)
                self._action = load_action(value["code"], bool(value.get("binary")), value.get("main") or "main")
            except UndecodableCode as error:
                return _error(400, str(error))
            except ActionLoadError as error:
                print(error, file=sys.stderr)
                self._end_once_answered()
                return _error(502, str(error))
            return 200, b'{"ok":true}'

    def run(self, body: bytes) -> tuple[int, bytes]:
        """``POST /run``: call the action with ``value`` and the ``__OW_*`` environment.

        Whatever the outcome, the sentinel follows once answered, so a log reader never waits in
        vain; a memory report that was asked for goes just before it, in the same write.
        """
        report = False
        try:
            try:
                message = _parse_object(body)
            except BadRequest as error:
                return _error(400, str(error))
            value = message.get("value")
            if value is None:
                value = {}
            if not isinstance(value, (dict, list)):
                return _error(400, NOT_AN_ARGUMENT)
            options = self._options(value.pop(RESERVED, None) if isinstance(value, dict) else None)
            if options.get("keep_warm"):
                return 200, b'{"warm":true}'
            message.update((key, item) for key, item in options.items() if key in RESERVED_FIELDS)
            action = self._action
            if action is None:
                return _error(500, "no action defined yet")
            report = bool(options.get("report_memory"))
            return _call(action, value, message)
        finally:
            self._end_once_answered(MEMORY_REPORT_PREFIX + str(self._memory_peak.read()) if report else None)

    def _options(self, options: Any) -> dict[str, Any]:
        """``options`` if the gateway that deployed this container wrote them, else none."""
        if not (isinstance(options, dict) and isinstance(options.get("key"), str) and self._options_key):
            return {}
        return options if hmac.compare_digest(options["key"].encode(), self._options_key.encode()) else {}


def _call(action: Action, value: dict[str, Any] | list[Any], message: dict[str, Any]) -> tuple[int, bytes]:
    try:
        with activation_env(ow_env(message)):
            result = action(value)
        if not isinstance(result, (dict, list)):
            return _error(502, NOT_A_RESULT)
        return 200, _encode(result)  # inside the try: an unserialisable result is the action's error
    except (Exception, SystemExit) as error:  # noqa: BLE001 - any failure of the action is its result
        print_traceback()
        return _error(502, f"{type(error).__name__}: {error}")


def _parse_object(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequest(f"Error unmarshaling request: {error}") from None
    if not isinstance(message, dict):
        raise BadRequest("Error unmarshaling request: the body must be a JSON object")
    return message


def _init_value(body: bytes) -> dict[str, Any]:
    value = _parse_object(body).get("value") or {}
    if not isinstance(value, dict):
        raise BadRequest("Error unmarshaling request: 'value' must be an object")
    for key, kind in (("code", str), ("main", str), ("name", str), ("binary", bool), ("env", dict)):
        if value.get(key) is not None and not isinstance(value[key], kind):
            raise BadRequest(f"Error unmarshaling request: 'value.{key}' must be a {kind.__name__}")
    return value


def _set_init_env(env: dict[str, Any]) -> None:
    """The action's ``env`` (set at init, before its module code runs)."""
    for key, value in env.items():
        os.environ[key] = value if isinstance(value, str) else json.dumps(value)


def _error(status: int, message: str) -> tuple[int, bytes]:
    return status, _encode({"error": message})


def _encode(answer: Any) -> bytes:
    return json.dumps(answer, ensure_ascii=False).encode("utf-8")


def _end_activation(report: str | None = None) -> None:
    """The sentinel on both streams, ``report`` on stderr before it (one write: one wake-up of the reader)."""
    sys.stdout.write(SENTINEL + "\n")
    sys.stdout.flush()
    sys.stderr.write(SENTINEL + "\n" if report is None else f"{report}\n{SENTINEL}\n")
    sys.stderr.flush()

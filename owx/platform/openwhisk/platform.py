"""Platform ``openwhisk``: every activation runs on an upstream OpenWhisk, through its public REST API only.

owx stays the API its users talk to; upstream it deploys each action (per revision and limits,
:mod:`.naming`) into one private package per owx namespace, invokes it blocking, and reads the
upstream record back (:mod:`.records`). It deploys and invokes with owx's upstream key, or with the
caller's own upstream account where it has one (``accounts``, :mod:`.accounts`). What OpenWhisk does
not offer is typed as absent: ``replicas`` (a client cannot pick a container: Canary keeps runtimes
warm with keep-warm activations and re-runs a failed function from its checkpoint wherever OpenWhisk
places it) and ``resources`` (containers are on the invoker nodes: ``owx agent`` runs there). The whole upstream
is one node, ``upstream``, whose budget is the memory its invokers give owx
(``upstream.user_memory_mb``), for Canary's gang admission.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from owx.common.eventloop import run_on_thread
from owx.platform.interface import ContainerListener, Platform, PlatformError
from owx.platform.ledger import MemoryLedger
from owx.platform.openwhisk.accounts import UpstreamAccounts
from owx.platform.openwhisk.client import Answer, UpstreamClient, UpstreamRefused, backoff
from owx.platform.openwhisk.deployments import Deployments
from owx.platform.openwhisk.naming import UpstreamName, package_of, path_of, readable_prefix
from owx.platform.openwhisk.records import is_record, outcome_of
from owx.platform.openwhisk.retry_turns import RetryTurns
from owx.platform.settings import UpstreamSettings
from owx.platform.types import (
    INTERNAL_ERROR,
    ActionSpec,
    ContainerInfo,
    NodeInfo,
    PlatformLimits,
    RunOutcome,
    RunRequest,
)
from owx.runtimes.protocol import OPTIONS_KEY_ENV, RESERVED

log = logging.getLogger(__name__)

NODE = "upstream"
MB = 1024 * 1024
BLOCKING_WAIT_S = 60.0  # OpenWhisk answers a blocking invoke with 202 after at most a minute
RESULT_GRACE_S = 30.0  # how long after its time limit an activation's record may still appear
NO_RECORD = "whisk internal error: the upstream activation {id} left no record within {s:.0f} s of its time limit"
_ACTIVATION_ID = re.compile(r"[0-9a-f]{32}", re.ASCII)


class OpenWhiskPlatform(Platform):
    """An upstream OpenWhisk behind owx."""

    name: ClassVar[str] = "openwhisk"

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        self.ledger = MemoryLedger()
        self.ledger.add_node(NODE, settings.user_memory_mb * MB)
        self.replicas = None
        self.resources = None
        self._background = ThreadPoolExecutor(2, thread_name_prefix="owx-upstream")  # keep-warms
        self._cleanups = ThreadPoolExecutor(1, thread_name_prefix="owx-upstream-cleanup")
        self._cleanups_due: set[tuple[int, str, str]] = set()  # (account, package, prefix) not yet begun
        self._cleanups_lock = threading.Lock()
        self._secret = (settings.auth or secrets.token_hex(32)).encode()
        self.accounts: UpstreamAccounts = UpstreamAccounts(settings, self._deployments)
        self._turns = RetryTurns(settings.poll_s)

    # -- Platform ---------------------------------------------------------------------------
    def run(self, spec: ActionSpec, request: RunRequest, node: str | None = None,
            claim: str | None = None) -> RunOutcome:
        """Run on the upstream; raises :class:`PlatformError` when the upstream cannot be used."""
        if request.reservation:  # a new container's memory is the upstream invokers' business
            self.ledger.release(request.reservation)
        account = self.accounts.of(request.namespace)
        answer = self._invoke(account, spec, request)
        pending = _pending(answer)
        return self._await(account.client, pending, spec) if pending is not None else _recorded(answer)

    async def run_warm(self, spec: ActionSpec, request: RunRequest) -> RunOutcome | None:
        """:meth:`run` from the gateway's event loop, without a thread, once ``spec``'s revision is
        deployed upstream (None before: its first run deploys it on a thread). An invocation the
        upstream stopped waiting for (one that runs longer than a minute) is polled from the loop
        too, so however many there are they hold no thread; one it lost (404) is deployed again on
        a thread."""
        account = self.accounts.of(request.namespace)
        target = account.target(spec)
        if request.reservation or not account.has(target):
            return None
        answer = await self._sent_async(account, spec, target, request)
        if _deleted(answer):
            account.forget(target)
            return await run_on_thread(None, self.run, spec, request)
        pending = _pending(answer)
        if pending is not None:
            return await self._await_async(account.client, pending, spec)
        return _recorded(answer)

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(NODE, True, self.settings.user_memory_mb * MB, None, self.name)]

    def warm_nodes(self, spec: ActionSpec) -> list[str]:
        return []

    def subscribe(self, listener: ContainerListener) -> None:
        """OpenWhisk reports no container events: failures are read from the records instead."""

    def containers(self) -> list[ContainerInfo]:
        return []

    def keep_warm(self, spec: ActionSpec) -> None:
        """A keep-warm activation (with the account of the action's owner): owx's runtime answers it
        without running the action."""
        account = self.accounts.of(path_of(spec)[0])
        target = account.ensure(spec)
        self._background.submit(self._fire, account.client, target, self._input(target, {}, {"keep_warm": True}))

    def forget(self, path: str) -> None:
        """Delete the upstream deployments of ``namespace/[pkg/]name``, in the background: in owx's own
        namespace, the owner's account, and the accounts of other callers that deployed it since
        this gateway started (a shared action runs in its callers' accounts). Asking every account
        would cost one upstream call per tenant per update; what a restart forgot stays there unused."""
        namespace, _, relative = path.partition("/")
        package = package_of(self.settings.prefix, namespace)
        owners = (self.accounts.shared, self.accounts.of(namespace))
        for account in self.accounts.every():
            if account in owners or account.holds(package):
                self._clean_soon(account, package, readable_prefix(relative))

    def _clean_soon(self, account: Deployments, package: str, prefix: str) -> None:
        """Delete ``account``'s deployments of ``package/prefix*`` on the cleanup thread, once however
        often the action is updated before that begins (each is a listing of the whole package: a
        tenant's burst of updates made a queue of them), and never in the way of a keep-warm."""
        due = (id(account), package, prefix)
        with self._cleanups_lock:
            if due in self._cleanups_due:
                return
            self._cleanups_due.add(due)

        def clean() -> None:
            with self._cleanups_lock:
                self._cleanups_due.discard(due)
            account.delete(package, prefix)

        self._cleanups.submit(clean)

    def limits(self) -> PlatformLimits:
        budget = self.settings.user_memory_mb * MB
        return PlatformLimits(budget, budget, 1)

    def close(self) -> None:
        self._background.shutdown(wait=True, cancel_futures=True)
        self._cleanups.shutdown(wait=True, cancel_futures=True)
        self.accounts.close()

    # -- internals ----------------------------------------------------------------------------
    def _deployments(self, client: UpstreamClient) -> Deployments:
        return Deployments(client, self.settings.prefix,
                           lambda spec, target: _action_body(spec, self._options_key(target)))

    def _options_key(self, target: UpstreamName) -> str:
        """What the deployment's runtime takes as proof that ``__owx`` comes from this gateway: derived
        from owx's upstream key, so every owx in front of the upstream and every restart agree."""
        return hmac.new(self._secret, target.path.encode(), hashlib.sha256).hexdigest()

    def _input(self, target: UpstreamName, value: dict[str, Any] | list[Any],
               options: dict[str, Any]) -> dict[str, Any]:
        """The upstream activation's input: the caller's, with this gateway's own ``__owx`` (whatever
        the caller put under the reserved names is dropped)."""
        if not isinstance(value, dict):
            raise PlatformError(400, "an upstream OpenWhisk takes only objects as action input")
        own = {key: item for key, item in value.items() if key not in (RESERVED, OPTIONS_KEY_ENV)}
        return {**own, RESERVED: {**options, "key": self._options_key(target)}}

    def _run_input(self, spec: ActionSpec, target: UpstreamName, request: RunRequest) -> dict[str, Any]:
        return self._input(target, request.value, {**_reserved(spec, request), "report_memory": True})

    def _invoke(self, account: Deployments, spec: ActionSpec, request: RunRequest) -> Answer:
        """A blocking invoke of ``spec``'s deployment in ``account``, deployed first unless it is (once
        more if it was deleted upstream behind owx's back). While the upstream refuses without running
        anything, both are sent again for ``retry_s`` (then the refusal is raised), when the caller's
        namespace's turn comes (:mod:`.retry_turns`); each attempt gets its own deadline."""
        deadline = None
        redeployed = False
        try:
            while True:
                try:
                    target = account.ensure(spec)
                    answer = account.client.invoke(target.path, self._run_input(spec, target, request),
                                                   blocking=True, wait_s=_wait_s(spec))
                except UpstreamRefused as exc:
                    deadline = deadline or self._join(account, request.namespace)
                    time.sleep(self._turn(account, request.namespace, exc, deadline))
                    continue
                if redeployed or not _deleted(answer):
                    return answer
                account.forget(target)
                redeployed = True
        finally:
            if deadline is not None:
                self._turns.leave(account, request.namespace)

    async def _sent_async(self, account: Deployments, spec: ActionSpec, target: UpstreamName,
                          request: RunRequest) -> Answer:
        """A blocking invoke of the deployment ``target``, from the event loop, sent again as
        :meth:`_invoke` sends it."""
        deadline = None
        try:
            while True:
                try:
                    return await account.client.invoke_async(target.path, self._run_input(spec, target, request),
                                                             _wait_s(spec))
                except UpstreamRefused as exc:
                    deadline = deadline or self._join(account, request.namespace)
                    await asyncio.sleep(self._turn(account, request.namespace, exc, deadline))
        finally:
            if deadline is not None:
                self._turns.leave(account, request.namespace)

    def _join(self, account: Deployments, namespace: str) -> float:
        """Wait for turns on ``account`` with ``namespace``'s other refused activations; the deadline."""
        self._turns.join(account, namespace)
        return time.monotonic() + self.settings.retry_s

    def _turn(self, account: Deployments, namespace: str, refusal: UpstreamRefused, deadline: float) -> float:
        """Seconds until ``namespace``'s refused activation goes to ``account`` again; the refusal if its
        turn would come after ``deadline``."""
        wait = self._turns.wait_s(account, namespace, deadline)
        if wait is None:
            raise refusal
        return wait

    def _await(self, client: UpstreamClient, activation_id: str, spec: ActionSpec) -> RunOutcome:
        """Poll for the record of an activation the upstream stopped waiting for (on a thread)."""
        for wait_s in _polls(spec, self.settings.poll_s):
            try:
                answer: Answer | None = client.activation(activation_id)
            except PlatformError as exc:
                _raise_unless_away(exc)
                answer = None  # its record may still come
            if _is_record_answer(answer):
                return outcome_of(answer.body)  # type: ignore[union-attr]
            time.sleep(wait_s)
        return _no_record(activation_id)

    async def _await_async(self, client: UpstreamClient, activation_id: str, spec: ActionSpec) -> RunOutcome:
        """:meth:`_await` from the event loop."""
        for wait_s in _polls(spec, self.settings.poll_s):
            try:
                answer: Answer | None = await client.activation_async(activation_id)
            except PlatformError as exc:
                _raise_unless_away(exc)
                answer = None  # its record may still come
            if _is_record_answer(answer):
                return outcome_of(answer.body)  # type: ignore[union-attr]
            await asyncio.sleep(wait_s)
        return _no_record(activation_id)

    def _fire(self, client: UpstreamClient, target: UpstreamName, body: dict[str, Any]) -> None:
        try:
            client.invoke(target.path, body, blocking=False, wait_s=self.settings.timeout_s)
        except PlatformError as exc:
            log.info("keep-warm of %s failed: %s", target.path, exc)

def _polls(spec: ActionSpec, poll_s: float) -> Iterator[float]:
    """The waits between polls for the record of an activation of ``spec``, until its time limit and
    ``RESULT_GRACE_S`` are over."""
    return _waits(spec.timeout_ms / 1000 + RESULT_GRACE_S, poll_s)


def _waits(duration_s: float, poll_s: float) -> Iterator[float]:
    """Waits between attempts for ``duration_s`` from when the first is asked for: from ``poll_s``,
    growing to 1 s."""
    started = time.monotonic()
    deadline = started + duration_s
    while time.monotonic() < deadline:
        yield backoff(poll_s, started)


def _raise_unless_away(exc: PlatformError) -> None:
    """A failed poll passes when the upstream is only away for a moment (503); anything else is raised."""
    if exc.status != 503:
        raise exc


def _is_record_answer(answer: Answer | None) -> bool:
    return answer is not None and answer.status == 200 and is_record(answer.body)


def _no_record(activation_id: str) -> RunOutcome:
    now = int(time.time() * 1000)
    return RunOutcome(INTERNAL_ERROR, {"error": NO_RECORD.format(id=activation_id, s=RESULT_GRACE_S)}, [],
                      now, now, node=NODE, annotations=[{"key": "upstreamActivationId", "value": activation_id}])


def _action_body(spec: ActionSpec, options_key: str) -> dict[str, Any]:
    exec_doc: dict[str, Any] = {"kind": spec.kind, "binary": spec.binary}
    if spec.code is not None:
        exec_doc.update(code=spec.code, main=spec.main)
    if spec.image:
        exec_doc["image"] = spec.image
    return {
        "exec": exec_doc,
        "limits": {"memory": spec.memory_mb, "timeout": spec.timeout_ms, "logs": spec.logs_bytes // MB,
                   "concurrency": spec.concurrency},
        # never the upstream's key: the caller's own owx key reaches the action through __owx
        "annotations": [{"key": "provide-api-key", "value": False}, {"key": "owx-action", "value": spec.key}],
        "parameters": [{"key": key, "value": value, "init": True}
                       for key, value in {**spec.env, OPTIONS_KEY_ENV: options_key}.items()],
    }


def _reserved(spec: ActionSpec, request: RunRequest) -> dict[str, Any]:
    """What the runtime turns into ``__OW_*`` variables (OpenWhisk would otherwise give its own)."""
    deadline_ms = int(time.time() * 1000) + spec.timeout_ms
    return {key: value for key, value in request.payload(deadline_ms).items() if key != "value"}


def _wait_s(spec: ActionSpec) -> float:
    """How long to wait for the answer to a blocking invoke of ``spec``."""
    return min(BLOCKING_WAIT_S, spec.timeout_ms / 1000) + RESULT_GRACE_S


def _deleted(answer: Answer) -> bool:
    """Whether the upstream no longer has the action invoked (deleted behind owx's back)."""
    return answer.status == 404 and not is_record(answer.body)


def _pending(answer: Answer) -> str | None:
    """The id of the activation, if the upstream answered before its record was made (a 202); one
    that is not OpenWhisk's 32 hex digits is the upstream's fault (it goes into URLs and records)."""
    activation_id = answer.activation_id or _id(answer)
    if answer.status == 202 or (activation_id and not is_record(answer.body)):
        if not _ACTIVATION_ID.fullmatch(activation_id):
            raise PlatformError(502, f"The upstream OpenWhisk answered the invocation with an activation id "
                                     f"that is not one: {activation_id[:100]!r}")
        return activation_id
    return None


def _recorded(answer: Answer) -> RunOutcome:
    """The outcome of an invocation the upstream answered with its record."""
    if is_record(answer.body):
        return outcome_of(answer.body)
    raise PlatformError(502, f"The upstream OpenWhisk answered the invocation with {answer.status}: "
                             f"{answer.body!r:.300}")


def _id(answer: Answer) -> str:
    body = answer.body if isinstance(answer.body, dict) else {}
    return str(body.get("activationId", ""))

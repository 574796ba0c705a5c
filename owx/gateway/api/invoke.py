"""``POST /api/v1/namespaces/{ns}/actions/{[pkg/]name}``: invoke, served on the event loop.

The one endpoint the server answers without Flask (every other route is a Flask view, see
:mod:`owx.gateway.http.wsgi`): a warm invocation is the hot path, and Flask's request cycle alone
(a context, URL matching, hooks, a response object) costs more than the rest of the invocation.
Everything it decides is decided by the same functions the Flask views use (names, flags, bodies,
errors); what would block (a caller or action not seen lately, so read from the store; an
extension's admission) runs on one of the server's threads.

Answers as OpenWhisk: 202 ``{"activationId"}`` unless ``blocking=true``; blocking, the record
(``result=true``, or a result that is an array: the result only) with 200, 502 for the action's
errors or 500 for owx's, and a 202 when the activation outlasts ``timeout`` (milliseconds; at most
and by default ``blocking_wait_s``). Every answer names its transaction in
``X-Request-ID`` (the action gets the same id as ``__OW_TRANSACTION_ID``), and an activation in
``X-OpenWhisk-Activation-Id``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from functools import lru_cache, partial
from urllib.parse import parse_qsl, unquote_to_bytes

from owx.common.eventloop import run_on_thread
from owx.gateway import cors, errors
from owx.gateway.api.request_args import boolean, bounded, object_from, wait_timeout_s
from owx.gateway.catalog import ResolvedAction
from owx.gateway.errors import ApiError
from owx.gateway.http.fair_pool import FairPool
from owx.gateway.http.messages import Request, Response, error_response, header_lines, json_response
from owx.gateway.identity import Identity
from owx.gateway.ids import transaction_id as caller_transaction
from owx.gateway.names import EntityPath, check_namespace, parse_relative
from owx.gateway.pipeline.invoke import Completion
from owx.gateway.service import Gateway
from owx.gateway.stores import StoreUnavailable
from owx.gateway.turns import lookup_turn

log = logging.getLogger(__name__)
ACTIVATION_HEADER = "x-openwhisk-activation-id"
ROUTE = "/api/v1/namespaces/<ns>/actions/<path:name>"  # as the metrics name Flask's routes
_PREFIX = b"/api/v1/namespaces/"
_ACTIONS = "/actions/"
_CORS = header_lines(cors.API.items())
ACTIVATION_HEADER_BYTES = ACTIVATION_HEADER.encode()


class InvokeEndpoint:
    """The invoke route of one gateway; ``match(request)`` gives its handler for requests it serves."""

    def __init__(self, gateway: Gateway, threads: FairPool) -> None:
        self.gateway = gateway
        self.threads = threads  # for what may block: store reads, gated admission, held waits (the caller's turn)
        self.settings = gateway.settings.gateway

    def match(self, request: Request) -> Callable[[Request], Awaitable[Response | None]] | None:
        """This endpoint's handler if ``request`` is an invoke, else None (Flask answers it)."""
        if request.method != "POST" or not request.raw_path.startswith(_PREFIX):
            return None
        where = _split(request.raw_path)
        return None if where is None else partial(self.handle, *where)

    async def handle(self, namespace: str, name: str, request: Request) -> Response | None:
        """Answer one invoke of ``name`` in ``namespace`` (as the path gives them); a blocking invoke
        is answered as soon as its record is durable, through ``request.answer`` (None returned)."""
        started = time.perf_counter()
        transaction_id = caller_transaction(request.header(b"x-request-id"))
        metrics = self.gateway.metrics

        def answer(response: Response) -> None:
            if metrics is not None:
                self.gateway.loop.loop.call_soon(metrics.request, "POST", ROUTE, response.status,
                                                 time.perf_counter() - started)
            request.answer(response)

        try:
            await self._invoke(namespace, name, request, transaction_id, answer)
        except ApiError as exc:
            answer(error_response(exc.status, exc.message, transaction_id, {**cors.API, **exc.headers}))
        except StoreUnavailable as exc:
            log.error("store unavailable: %s", exc)
            answer(error_response(503, errors.SYSTEM_UNAVAILABLE.format(detail=exc), transaction_id, cors.API))
        except Exception:  # noqa: BLE001 - any bug is a 500 with OpenWhisk's body, never a dropped request
            log.exception("invoke failed")
            answer(error_response(500, errors.INTERNAL, transaction_id, cors.API))
        return None

    async def _invoke(self, namespace: str, name: str, request: Request, transaction_id: str,
                      answer: Callable[[Response], None]) -> None:
        """Admit the invoke, answer it (202 at once, or the record once durable, or 202 after the wait),
        and run its activation in this task; errors before the answer raise."""
        identity = await self._caller(request)
        path = _path(identity.namespace if namespace == "_" else namespace, name)
        blocking, result_only, wait_s = _options(request.query, self.settings.blocking_wait_s)
        invoker = self.gateway.invoker
        invoker.throttle.check_rate(identity.namespace)  # before the body is parsed, as OpenWhisk's entitlement
        try:
            params = object_from(bounded(request.body, self.settings.max_payload_bytes))
            resolved = await self._resolved(path, identity.namespace)
        except ApiError:
            invoker.throttle.count_refused(identity.namespace)
            raise
        if invoker.gated(resolved):  # an extension reserves what it needs first, which may block: a thread
            await self._gated(identity, resolved, params, blocking, result_only, wait_s, transaction_id, answer)
            return
        activation = invoker.admit(identity, resolved, params, blocking, transaction_id)
        head = _head(transaction_id, activation.id)
        if not blocking:
            answer(_accepted(activation.id, head))
            await invoker.run(activation)
            return
        held = self._held_thread(identity.namespace)

        def answered(response: Response) -> None:
            timer.cancel()
            if held is not None:
                held.set()
            answer(response)

        # past the wait: 202, it goes on; but a 202 promises a record, which only a journal entry keeps
        timer = self.gateway.loop.loop.call_later(wait_s, lambda: answered(
            _accepted(activation.id, head) if activation.journalled else _unjournalled(activation.id, transaction_id)))
        try:
            await invoker.run(activation, lambda completion: answered(_record_answer(completion, result_only, head)))
        finally:
            timer.cancel()
            if held is not None:
                held.set()

    async def _gated(self, identity: Identity, resolved: ResolvedAction, params: dict, blocking: bool,
                     result_only: bool, wait_s: float, transaction_id: str,
                     answer: Callable[[Response], None]) -> None:
        """An invoke of an action behind an extension's gate: started on a thread, waited for on the loop."""
        invocation = await self._on_thread(identity.namespace, self.gateway.invoker.start, identity, resolved, params,
                                           transaction_id)
        head = _head(transaction_id, invocation.activation_id)
        accepted = _accepted(invocation.activation_id, head)
        if not blocking:
            answer(accepted)
            return
        done = asyncio.wrap_future(invocation.done)
        held = self._held_thread(identity.namespace)
        try:
            completion = await asyncio.wait_for(asyncio.shield(done), wait_s)
        except asyncio.TimeoutError:
            answer(accepted)  # it goes on
            return
        finally:
            if held is not None:
                held.set()
        answer(_record_answer(completion, result_only, head))

    async def _caller(self, request: Request) -> Identity:
        auth, authorization = self.gateway.auth, request.authorization
        identity = auth.identify_cached(authorization)
        if identity is not None:
            return identity
        turn = lookup_turn(auth, authorization, request.client, self.settings.unknown_turn_by_address)
        return await self._on_thread(turn, auth.identify, authorization)

    async def _resolved(self, path: EntityPath, caller: str) -> ResolvedAction:
        catalog = self.gateway.catalog
        return catalog.resolved(path, caller) or await self._on_thread(caller, catalog.resolve, path, caller)

    def _held_thread(self, namespace: str) -> threading.Event | None:
        """Without ``defer_waits``, a server thread held in ``namespace``'s turn until the event is set
        (a benchmark's control: what a plain WSGI server does while a request waits); None with it."""
        if self.settings.defer_waits:
            return None
        held = threading.Event()
        self.threads.submit_as(namespace, held.wait)
        return held

    async def _on_thread(self, namespace: str, function, *args):  # type: ignore[no-untyped-def]
        """``function(*args)`` on one of the threads, in ``namespace``'s turn."""
        return await run_on_thread(self.threads.for_tenant(namespace), function, *args)


# What clients send again and again is parsed once (pure functions, bounded caches; what is refused
# raises, and is not cached)
@lru_cache(maxsize=4096)
def _split(raw_path: bytes) -> tuple[str, str] | None:
    """(namespace, ``[pkg/]name``) of an invoke path (under ``_PREFIX``), or None when it is not one."""
    path = unquote_to_bytes(raw_path[len(_PREFIX):]).decode("utf-8", "replace")
    namespace, sep, name = path.partition(_ACTIONS)
    if not sep or not namespace or "/" in namespace or not name:
        return None
    return namespace, name


@lru_cache(maxsize=4096)
def _path(namespace: str, name: str) -> EntityPath:
    """The action ``name`` (``[pkg/]name``) in ``namespace``, names checked (400 otherwise)."""
    return parse_relative(check_namespace(namespace), name)


@lru_cache(maxsize=1024)
def _options(raw_query: bytes, max_wait_s: float) -> tuple[bool, bool, float]:
    """(blocking, result only, how long a blocking caller waits) of an invoke's query; 400 for bad values."""
    query = _query(raw_query)
    return (boolean("blocking", query.get("blocking")), boolean("result", query.get("result")),
            wait_timeout_s(query.get("timeout"), max_wait_s))


def _query(raw: bytes) -> dict[str, str]:
    """The query's parameters, the first of a repeated name winning (as werkzeug's ``args.get``)."""
    text = raw.decode("latin-1")
    if "%" in text or "+" in text:
        pairs = parse_qsl(text, keep_blank_values=True)
    else:  # what clients send: plain words, parsed without the general machinery
        pairs = [(name, value) for name, _, value in (part.partition("=") for part in text.split("&") if part)]
    return dict(reversed(pairs))


def _head(transaction_id: str, activation_id: str) -> bytes:
    """An answer's header lines: its transaction, its activation and the API's CORS headers (ids are
    hex digits: no line break to look for)."""
    return b"X-Request-ID: %s\r\n%s: %s\r\n%s" % (transaction_id.encode(), ACTIVATION_HEADER_BYTES,
                                                  activation_id.encode(), _CORS)


def _accepted(activation_id: str, head: bytes) -> Response:
    """OpenWhisk's 202: the activation goes on, its record comes later."""
    return json_response({"activationId": activation_id}, 202, head=head)


def _unjournalled(activation_id: str, transaction_id: str) -> Response:
    """The 503 of a blocking invoke still running whose journal entry could not be written (a full
    disk): no 202, which would promise a record this gateway may not keep."""
    detail = f"activation {activation_id} runs, but the activation log cannot be written: it may not be recorded"
    return error_response(503, errors.SYSTEM_UNAVAILABLE.format(detail=detail), transaction_id,
                          {**cors.API, ACTIVATION_HEADER: activation_id})


def _record_answer(completion: Completion, result_only: bool, head: bytes) -> Response:
    """A blocking invoke's answer: the record, or with ``result=true`` (or an array result, as
    OpenWhisk answers it either way) the result alone."""
    result = completion.record["response"]["result"]
    answer = result if result_only or isinstance(result, list) else completion.record
    return json_response(answer, completion.status, head=head)

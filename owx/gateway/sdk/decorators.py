"""``@action``: deploy a Python function as an OpenWhisk action and call it remotely.

The function must be self-contained (imports inside its body) and take and return
JSON values.  ``f.invoke(*args, **kwargs)`` runs it remotely and returns its value,
``f.submit(...)`` returns a future, ``f.map(items)`` fans out and keeps the order.
"""

from __future__ import annotations

import inspect
import textwrap
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Literal

from owx.gateway.sdk.client import ActionFailed, Client

ENTRY = "__owx_entry"
_WRAPPER = '''

def {entry}(params):
    args = params.pop("__owx_args", [])
    return {{"value": {function}(*args, **params)}}
'''


class SourceUnavailable(ValueError):
    """A function whose source Python cannot find (typed at an interactive prompt or in ``python -c``):
    the action is made of that source, so there is nothing to deploy."""


def function_source(function: Callable[..., Any]) -> str:
    """The function's source without decorators, plus the OpenWhisk entry point. Raises SourceUnavailable."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError) as exc:
        raise SourceUnavailable(f"@action deploys the source of {getattr(function, '__name__', function)!r}, which "
                                "Python cannot find: define the function in a file (not at an interactive "
                                "prompt or in python -c)") from exc
    lines = textwrap.dedent(source).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ")))
    return "\n".join(lines[start:]) + _WRAPPER.format(entry=ENTRY, function=function.__name__)


def _params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {**kwargs, "__owx_args": list(args)} if args else dict(kwargs)


def _value(record: dict[str, Any]) -> Any:
    if not record.get("response", {}).get("success"):
        raise ActionFailed(record)
    return record["response"]["result"]["value"]


class RemoteFunction:
    """A deployed function: ``invoke`` (blocking), ``submit`` (future), ``map`` (fan-out)."""

    def __init__(self, function: Callable[..., Any], client: Client | None, name: str | None,
                 kind: str, limits: dict[str, int], annotations: dict[str, Any]) -> None:
        self.function = function
        self.source = function_source(function)  # now: a function without source fails where it is decorated
        self.name = name or function.__name__
        self.kind = kind
        self.limits = limits
        self.annotations = annotations
        self._client = client
        self._deployed = False

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client()
        return self._client

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call locally, like the undecorated function."""
        return self.function(*args, **kwargs)

    def deploy(self) -> dict[str, Any]:
        record = self.client.put_action(self.name, self.source, kind=self.kind, main=ENTRY,
                                        limits=self.limits or None, annotations=self.annotations or None)
        self._deployed = True
        return record

    def _ensure(self) -> None:
        if not self._deployed:
            self.deploy()

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        self._ensure()
        return _value(self.client.invoke_record(self.name, _params(args, kwargs)))

    def submit(self, *args: Any, **kwargs: Any) -> Future[Any]:
        self._ensure()
        outer: Future[Any] = Future()
        inner = self.client.submit(self.name, _params(args, kwargs))

        def _done(done: Future[dict[str, Any]]) -> None:
            try:
                outer.set_result(_value(done.result()))
            except Exception as exc:  # noqa: BLE001 - handed to the caller through the future
                outer.set_exception(exc)

        inner.add_done_callback(_done)
        return outer

    def map(self, items: Iterable[Any]) -> list[Any]:
        """One activation per item (a dict item is keyword arguments); results in input order."""
        futures = [self.submit(**item) if isinstance(item, dict) else self.submit(item) for item in items]
        return [future.result() for future in futures]


def action(function: Callable[..., Any] | None = None, *, client: Client | None = None, name: str | None = None,
           kind: str = "python:3", memory: int | Literal["auto"] | None = None,
           timeout: int | Literal["auto"] | None = None, annotations: dict[str, Any] | None = None):
    """Decorator: ``@action`` or ``@action(memory=512, timeout=120_000)``; ``"auto"`` for a limit has the
    gateway estimate it from the action's own activations (DiSDeL), raising it once after a failure."""
    given = {"memory": memory, "timeout": timeout}
    limits = {k: v for k, v in given.items() if isinstance(v, int)}
    auto = {k: "auto" for k, v in given.items() if v == "auto"}
    annotations = {**(annotations or {}), **({"disdel": auto} if auto else {})}

    def wrap(fn: Callable[..., Any]) -> RemoteFunction:
        return RemoteFunction(fn, client, name, kind, limits, annotations)

    return wrap(function) if function is not None else wrap

"""The gateway's HTTP/1.1 server: connections (:mod:`.protocol`), requests and answers
(:mod:`.messages`), and the bridge to Flask views (:mod:`.wsgi`)."""

from __future__ import annotations

import asyncio

import uvloop

from owx.gateway.http.protocol import Connections, Handler, HttpConnection, Limits


def serve_forever(handler: Handler, host: str, port: int) -> None:
    """Serve ``handler`` on ``host:port`` in this thread until the process ends (a server of its own:
    the benchmarks' anchors; the gateway runs its listeners on its event loop, :mod:`owx.gateway.server`)."""

    async def serve() -> None:
        limits = Limits()
        connections = Connections(limits)
        server = await asyncio.get_running_loop().create_server(
            lambda: HttpConnection(handler, limits, "http", connections), host, port)
        await server.serve_forever()

    uvloop.run(serve())

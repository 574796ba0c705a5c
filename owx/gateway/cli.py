"""``owx up``: start the gateway and the embedded platform."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from owx.config import Settings
from owx.gateway import wskprops


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("up", help="start the gateway and the embedded platform")
    parser.add_argument("--host", help="listen address (OWX_HOST)")
    parser.add_argument("--port", type=int, help="listen port (OWX_PORT)")
    parser.add_argument("--data-dir", type=Path, help="where stores live (OWX_DATA_DIR)")
    parser.add_argument("--backend", choices=["local", "docker"], help="action containers (OWX_BACKEND)")
    parser.add_argument("--store", choices=["sqlite", "couchdb"], help="entity/activation store (OWX_STORE)")
    parser.add_argument("--auth", help="uuid:key for the default namespace on first start (OWX_AUTH)")
    parser.set_defaults(handler=up)


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in vars(args).items()
                 if k in ("host", "port", "data_dir", "backend", "store") and v is not None}
    return Settings(**overrides)


def up(args: argparse.Namespace) -> int:
    from owx.gateway.server import GatewayServer, stop_on_signals
    from owx.gateway.service import Gateway

    logging.basicConfig(level=os.environ.get("OWX_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from(args)
    gateway = Gateway.open(settings)
    identity = gateway.default_identity(args.auth or os.environ.get("OWX_AUTH"))
    server = GatewayServer(gateway, settings.host, settings.port)
    apihost = f"http://{settings.host}:{server.port}"
    written = wskprops.write_if_free(apihost, identity.auth)
    print(f"owx is up: apihost {apihost}  namespace {identity.namespace}", flush=True)
    print(f"auth {identity.auth}", flush=True)
    print(f"~/.wskprops {'written' if written else 'left as it was (it names another server)'}", flush=True)
    stop_on_signals()
    try:
        server.serve_forever()
    finally:
        gateway.close()
    return 0

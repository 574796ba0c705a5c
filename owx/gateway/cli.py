"""``owx up``: start the gateway on the embedded platform, on Docker, or in front of an upstream OpenWhisk."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from owx.gateway import wskprops
from owx.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("up", help="start the gateway (and the embedded platform, unless --upstream)")
    parser.add_argument("--host", help="listen address (OWX_GATEWAY__HOST)")
    parser.add_argument("--port", type=int, help="listen port (OWX_GATEWAY__PORT)")
    parser.add_argument("--data-dir", type=Path, help="where stores live (OWX_DATA_DIR)")
    parser.add_argument("--platform", choices=["embedded", "docker", "openwhisk"],
                        help="where activations run (OWX_PLATFORM__KIND)")
    parser.add_argument("--store", choices=["sqlite", "couchdb"], help="entity/activation store (OWX_GATEWAY__STORE)")
    parser.add_argument("--auth", help="uuid:key for the default namespace on first start (OWX_AUTH)")
    parser.add_argument("--upstream", metavar="URL", help="run every activation on this OpenWhisk (OWX_UPSTREAM__URL)")
    parser.add_argument("--upstream-auth", metavar="UUID:KEY", help="key of the upstream namespace (OWX_UPSTREAM__AUTH)")
    parser.add_argument("--upstream-insecure", action="store_true", default=None,
                        help="accept the upstream's self-signed certificate (OWX_UPSTREAM__INSECURE)")
    parser.add_argument("--no-extensions", action="store_true",
                        help="plain OpenWhisk: no Canary, Escra or DiSDeL estimation (OWX_EXTENSIONS='[]')")
    parser.set_defaults(handler=up)


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings tree: environment first, then what the command line gives."""
    settings = Settings()
    gateway: dict[str, Any] = {k: v for k, v in (("host", args.host), ("port", args.port), ("store", args.store))
                               if v is not None}
    platform: dict[str, Any] = {"kind": args.platform} if args.platform else {}
    upstream: dict[str, Any] = {k: v for k, v in (("url", args.upstream), ("auth", args.upstream_auth),
                                                  ("insecure", args.upstream_insecure)) if v is not None}
    if upstream.get("url"):
        platform["kind"] = "openwhisk"
    tree: dict[str, Any] = {
        "gateway": settings.gateway.model_copy(update=gateway),
        "platform": settings.platform.model_copy(update=platform),
        "upstream": settings.upstream.model_validate({**settings.upstream.model_dump(), **upstream}),
    }
    if args.data_dir is not None:
        tree["data_dir"] = args.data_dir
    if args.no_extensions:
        tree["extensions"] = []
    return settings.model_copy(update=tree)


def up(args: argparse.Namespace) -> int:
    from owx.gateway.server import GatewayServer, stop_on_signals
    from owx.gateway.service import Gateway

    logging.basicConfig(level=os.environ.get("OWX_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from(args)
    gateway = Gateway.open(settings)
    identity = gateway.default_identity(args.auth or os.environ.get("OWX_AUTH"))
    server = GatewayServer(gateway, settings.gateway.host, settings.gateway.port)
    apihost = f"http://{settings.gateway.host}:{server.port}"
    written = wskprops.write_if_free(apihost, identity.auth)
    where = settings.upstream.url if settings.platform.kind == "openwhisk" else f"the {settings.platform.kind} platform"
    print(f"owx is up: apihost {apihost}  namespace {identity.namespace}  activations run on {where}", flush=True)
    print(f"extensions: {', '.join(gateway.extensions) or 'none'}", flush=True)
    print(f"auth {identity.auth}", flush=True)
    print(f"~/.wskprops {'written' if written else 'left as it was (it names another server)'}", flush=True)
    stop_on_signals()
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0

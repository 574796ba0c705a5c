"""``owx up``: start the gateway on the embedded platform, on Docker, or in front of an upstream OpenWhisk."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from owx.common import malloc
from owx.common.gc_pauses import keep_pauses_short
from owx.gateway import wskprops
from owx.gateway.tls import TlsFiles, self_signed
from owx.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("up", help="start the gateway (and the embedded platform, unless --upstream)")
    parser.add_argument("--host", help="listen address (OWX_GATEWAY__HOST)")
    parser.add_argument("--port", type=int, help="HTTP port (OWX_GATEWAY__PORT, default 3233)")
    parser.add_argument("--tls-port", type=int, help="HTTPS port (OWX_GATEWAY__TLS_PORT, default 3443)")
    parser.add_argument("--tls-cert", type=Path, help="server certificate, PEM (default: self-signed, made on first start)")
    parser.add_argument("--tls-key", type=Path, help="the certificate's key, PEM")
    parser.add_argument("--data-dir", type=Path, help="where stores live (OWX_DATA_DIR)")
    parser.add_argument("--platform", choices=["embedded", "docker", "openwhisk"],
                        help="where activations run (OWX_PLATFORM__KIND)")
    parser.add_argument("--store", choices=["sqlite", "couchdb"], help="entity/activation store (OWX_GATEWAY__STORE)")
    parser.add_argument("--auth", help="uuid:key for the default namespace on first start (OWX_AUTH)")
    parser.add_argument("--upstream", metavar="URL", help="run every activation on this OpenWhisk (OWX_UPSTREAM__URL)")
    parser.add_argument("--upstream-auth", metavar="UUID:KEY", help="key of the upstream namespace; prefer OWX_UPSTREAM__AUTH: a command line is visible to every process of the machine")
    parser.add_argument("--upstream-account", metavar="NAMESPACE=UUID:KEY", action="append", type=_account,
                        help="an owx namespace's own upstream namespace, throttled apart from the others "
                        "(repeatable; OWX_UPSTREAM__ACCOUNTS, a JSON object)")
    parser.add_argument("--upstream-insecure", action="store_true", default=None,
                        help="accept the upstream's self-signed certificate (OWX_UPSTREAM__INSECURE)")
    parser.add_argument("--no-extensions", action="store_true",
                        help="plain OpenWhisk: no Canary, Escra or DiSDeL estimation (OWX_EXTENSIONS='[]')")
    parser.set_defaults(handler=up)


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings tree: environment first, then what the command line gives."""
    settings = Settings()
    gateway: dict[str, Any] = {k: v for k, v in (("host", args.host), ("port", args.port), ("store", args.store),
                                                 ("tls_port", args.tls_port), ("tls_cert", args.tls_cert),
                                                 ("tls_key", args.tls_key)) if v is not None}
    platform: dict[str, Any] = {"kind": args.platform} if args.platform else {}
    upstream: dict[str, Any] = {k: v for k, v in (("url", args.upstream), ("auth", args.upstream_auth),
                                                  ("insecure", args.upstream_insecure)) if v is not None}
    if args.upstream_account:
        upstream["accounts"] = {**settings.upstream.accounts, **dict(args.upstream_account)}
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


def _account(text: str) -> tuple[str, str]:
    namespace, sep, auth = text.partition("=")
    if not sep or not namespace:
        raise argparse.ArgumentTypeError("expected NAMESPACE=UUID:KEY")
    return namespace, auth


def up(args: argparse.Namespace) -> int:
    from owx.gateway.server import GatewayServer
    from owx.gateway.service import Gateway

    logging.basicConfig(level=os.environ.get("OWX_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    malloc.fix_mmap_threshold()  # large bodies and records freed go back to the system
    settings = settings_from(args)
    gateway = Gateway.open(settings)  # first: it owns the data dir, or refuses before anything there is touched
    try:
        tls = tls_files(settings)
    except BaseException:
        gateway.close()
        raise
    identity = gateway.default_identity(args.auth or os.environ.get("OWX_AUTH"))
    server = GatewayServer(gateway, settings.gateway.host, settings.gateway.port, tls, settings.gateway.tls_port or 0)
    try:
        written = wskprops.write_if_free(server.tls_url or server.url, identity.auth, tls.ca if tls else None)
        wskprops_state = "written" if written else "left as it was (it names another server)"
    except OSError as exc:  # a HOME that is missing or read-only: clients are told the apihost below
        wskprops_state = f"not written ({exc.strerror}: {exc.filename})"
    where = settings.upstream.url if settings.platform.kind == "openwhisk" else f"the {settings.platform.kind} platform"
    print(f"owx is up: apihost {server.url}  namespace {identity.namespace}  activations run on {where}", flush=True)
    if tls is not None:
        print(f"https apihost {server.tls_url}  certificate {tls.cert}" + (f"  CA {tls.ca}" if tls.ca else ""), flush=True)
    print(f"extensions: {', '.join(gateway.extensions) or 'none'}", flush=True)
    print(f"auth {identity.auth}", flush=True)
    print(f"~/.wskprops {wskprops_state}", flush=True)
    if settings.gateway.short_gc_pauses:
        keep_pauses_short()
    server.serve_forever()
    return 0


def tls_files(settings: Settings) -> TlsFiles | None:
    """The HTTPS certificate: the operator's, or one owx makes (and keeps) in the data dir."""
    gateway = settings.gateway
    if gateway.tls_port is None:
        return None
    if gateway.tls_cert is not None or gateway.tls_key is not None:
        if gateway.tls_cert is None or gateway.tls_key is None:
            raise SystemExit("owx up: --tls-cert and --tls-key go together")
        return TlsFiles(gateway.tls_cert, gateway.tls_key)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return self_signed(settings.data_dir, gateway.host)

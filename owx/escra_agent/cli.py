"""``owx agent``: the Escra node agent, or with ``--controller`` the cluster's resource allocator."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys

from pydantic import ValidationError

from owx.escra_agent.settings import MIB, TOKEN_ENV

NICE = -10


def _app_spec(text: str):
    """``name=web,cpu=2,memory-mb=1024[,containers=4][,adopt]`` -> AppLimits."""
    from owx.escra_agent.messages import AppLimits

    fields: dict[str, object] = {}
    keys = {"name": "name", "cpu": "cpu_cores", "memory-mb": "memory_bytes", "containers": "expected_containers"}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key == "adopt" and not value:
            fields["adopt_memory"] = True
        elif key in keys and value:
            fields[keys[key]] = int(float(value) * MIB) if key == "memory-mb" else value
        else:
            raise argparse.ArgumentTypeError(f"bad application field {part!r} (want name=,cpu=,memory-mb=[,containers=][,adopt])")
    try:
        return AppLimits.model_validate(fields)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"bad application {text!r}: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("agent", help="run the Escra node agent (or --controller)", description=__doc__)
    parser.add_argument("--controller", action="store_true", help="serve the resource allocator instead of an agent")
    parser.add_argument("--allocator", help="agent: allocator URL (default $OWX_ESCRA_ALLOCATOR_URL or http://127.0.0.1:3240)")
    parser.add_argument("--node", help="agent: this node's name (default $OWX_ESCRA_NODE or node0)")
    parser.add_argument("--cgroup-root", help="agent: embedded platform cgroup root (default: the one owx up uses "
                        "with the same OWX_DATA_DIR)")
    parser.add_argument("--app", help="agent: application of unlabelled containers (default openwhisk)")
    parser.add_argument("--docker", action="store_true", default=None, help="agent: also manage Docker containers")
    parser.add_argument("--period", type=float, help="agent: telemetry period in seconds (default 0.1)")
    parser.add_argument("--event-log", help="agent: append one JSON line per OOM rescue to this file")
    parser.add_argument("--metrics", metavar="HOST:PORT", help="agent: serve Prometheus /metrics there")
    parser.add_argument("--host", default="127.0.0.1", help="controller: listen address")
    parser.add_argument("--port", type=int, default=3240, help="controller: listen port")
    parser.add_argument("--define-app", type=_app_spec, action="append", default=[], metavar="SPEC",
                        help="controller: name=NAME,cpu=CORES,memory-mb=MB[,containers=N][,adopt] (repeatable)")
    for name, help_text in (("upsilon", "Υ (%% of the unallocated runtime per throttle)"),
                            ("gamma", "γ (share of the quota left unused)"), ("kappa", "κ"), ("sigma", "σ")):
        parser.add_argument(f"--{name}", type=float, help=f"controller: {help_text}")
    parser.add_argument("--window", type=int, help="controller: n, periods in the CPU windows")
    parser.add_argument("--no-fair-share", dest="fair_share", action="store_false", default=None,
                        help="controller: throttled containers grow by the paper's raise only")
    parser.add_argument("--delta-mb", type=float, help="controller: δ, reclaim margin in MiB (default 50)")
    parser.add_argument("--reclaim-s", type=float, help="controller: reclaim interval in seconds (default 5)")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _raise_priority()
    try:
        return _controller(args) if args.controller else _agent(args)
    except ValidationError as exc:
        print(f"owx agent: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def _raise_priority() -> None:
    """Agent and allocator answer every 100 ms period, and the agent's real-time OOM thread needs the
    interpreter its other threads hold: none may wait behind ordinary work on a busy node.
    Threads started later inherit the niceness."""
    try:
        os.nice(NICE)
    except OSError:
        logging.getLogger(__name__).info("running at normal priority (raising it is not permitted)")


def _controller(args: argparse.Namespace) -> int:
    from owx.escra_agent.allocator import ResourceAllocator
    from owx.escra_agent.server import serve
    from owx.escra_agent.settings import AllocatorParams

    overrides = {k: getattr(args, k) for k in ("upsilon", "gamma", "kappa", "sigma", "window", "fair_share") if getattr(args, k) is not None}
    if args.delta_mb is not None:
        overrides["delta_bytes"] = int(args.delta_mb * MIB)
    if args.reclaim_s is not None:
        overrides["reclaim_interval_s"] = args.reclaim_s
    allocator = ResourceAllocator(AllocatorParams(**overrides))
    for limits in args.define_app:
        allocator.add_application(limits)
    serve(allocator, args.host, args.port, os.environ.get(TOKEN_ENV) or None)
    return 0


def _agent(args: argparse.Namespace) -> int:
    from owx.escra_agent.agent import NodeAgent
    from owx.escra_agent.link import HttpLink
    from owx.escra_agent.settings import AgentSettings

    given = {"node": args.node, "cgroup_root": args.cgroup_root, "allocator_url": args.allocator, "app": args.app,
             "docker": args.docker, "period_s": args.period, "event_log": args.event_log}
    settings = AgentSettings(**{k: v for k, v in given.items() if v is not None})
    # The OOM thread must get the interpreter within a fraction of a millisecond of an event,
    # not after the default 5 ms switch interval of whatever thread holds it.
    sys.setswitchinterval(0.0002)
    agent = NodeAgent(settings, HttpLink(settings.allocator_url, settings.request_timeout_s,
                                         settings.token.get_secret_value() if settings.token else None))
    if args.metrics:
        from owx.escra_agent.metrics import serve_metrics

        port = serve_metrics(args.metrics, lambda: [agent.stats()])
        print(f"escra agent metrics on port {port}", flush=True)
    # A full garbage collection holds the interpreter for ~10 ms with every imported module's objects
    # to scan; the ones that exist now live as long as the agent, so collections skip them.
    gc.freeze()
    try:
        agent.run()
    finally:
        agent.stop()
    return 0

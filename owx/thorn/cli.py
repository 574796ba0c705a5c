"""``owx thorn``: the node daemon, its status, FRR config preview, and the namespace testbed."""

from __future__ import annotations

import argparse
import json
import logging
import sys

import requests

from owx.thorn.model import BfdSpec, DriverName, ThornConfigError, load_node


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("thorn", help="THORN node daemon and testbed")
    parser.set_defaults(handler=lambda _a: (parser.print_help(), 2)[1])
    cmds = parser.add_subparsers(dest="thorn_command", metavar="{run,status,config,testbed}")

    run = cmds.add_parser("run", help="set the node up and run FRR + reconciler + HTTP state/metrics")
    run.add_argument("--node", required=True, help="node description (YAML)")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(handler=_run)

    status = cmds.add_parser("status", help="print a running daemon's state")
    status.add_argument("--node", required=True, help="node description (YAML) of the running daemon")
    status.set_defaults(handler=_status)

    config = cmds.add_parser("config", help="print the FRR configuration generated for a node")
    config.add_argument("--node", required=True)
    config.set_defaults(handler=_config)

    tb = cmds.add_parser("testbed", help="namespace testbed: hosts dual-homed to two ToRs")
    tb.set_defaults(handler=lambda _a: (tb.print_help(), 2)[1])
    tbc = tb.add_subparsers(dest="testbed_command", metavar="{up,down,status,fault}")
    up = tbc.add_parser("up", help="build the testbed and wait until it converges")
    up.add_argument("--name", default="tb", help="testbed name (namespaces thn-<name>-*)")
    up.add_argument("--hosts", type=int, default=3)
    up.add_argument("--bfd-ms", type=int, default=20, help="BFD receive/transmit interval")
    up.add_argument("--period", type=float, default=2.0, help="reconciler full re-dump period (s)")
    up.add_argument("--driver", choices=[d.value for d in DriverName], default="auto")
    up.set_defaults(handler=_tb_up)
    down = tbc.add_parser("down", help="remove everything the testbed made")
    down.add_argument("--name", default="tb")
    down.set_defaults(handler=_tb_down)
    st = tbc.add_parser("status", help="paths, rules and BFD per host")
    st.add_argument("--name", default="tb")
    st.set_defaults(handler=_tb_status)
    fault = tbc.add_parser("fault", help="inject or clear a fault")
    fault.add_argument("--name", default="tb")
    fault.add_argument("kind", choices=["link-down", "link-up", "silent", "silent-off", "tor-down", "tor-up", "flap"])
    fault.add_argument("target", help="NODE/UPLINK (e.g. h1/up1) or a ToR name (t1)")
    fault.add_argument("--count", type=int, default=10, help="flaps")
    fault.set_defaults(handler=_tb_fault)


def _load(path: str):
    try:
        return load_node(path)
    except ThornConfigError as exc:
        print(f"owx thorn: {exc}", file=sys.stderr)
        return None


def _run(args: argparse.Namespace) -> int:
    from owx.thorn.daemon import run_daemon
    from owx.thorn.datapath.detect import DriverUnavailable
    from owx.thorn.frr import FrrError
    from owx.thorn.setup import SetupError

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    node = _load(args.node)
    if node is None:
        return 2
    try:
        return run_daemon(node)
    except (SetupError, FrrError, DriverUnavailable) as exc:
        print(f"owx thorn run: {exc}", file=sys.stderr)
        return 1


def _status(args: argparse.Namespace) -> int:
    node = _load(args.node)
    if node is None:
        return 2
    addr_file = node.run_dir / "http.addr"
    if not addr_file.exists():
        print(f"owx thorn status: no daemon running for {node.name} ({addr_file} missing)", file=sys.stderr)
        return 1
    try:
        print(json.dumps(requests.get(f"http://{addr_file.read_text().strip()}/state", timeout=5).json(), indent=1))
    except requests.RequestException as exc:
        print(f"owx thorn status: daemon of {node.name} not answering: {exc}", file=sys.stderr)
        return 1
    return 0


def _config(args: argparse.Namespace) -> int:
    from owx.thorn.frr_config import host_config

    node = _load(args.node)
    if node is None:
        return 2
    print(host_config(node).integrated())
    return 0


def _tb_up(args: argparse.Namespace) -> int:
    from owx.thorn.testbed import Testbed, TestbedError

    try:
        Testbed(args.name).up(hosts=args.hosts, bfd=BfdSpec(receive_ms=args.bfd_ms, transmit_ms=args.bfd_ms),
                              period_s=args.period, driver=args.driver)
    except (TestbedError, ValueError) as exc:
        print(f"owx thorn testbed up: {exc}", file=sys.stderr)
        return 1
    print(f"testbed {args.name} up and converged")
    return 0


def _tb_down(args: argparse.Namespace) -> int:
    from owx.thorn.testbed import Testbed

    removed = Testbed(args.name).down()
    print(f"testbed {args.name} down; removed namespaces: {', '.join(removed) or 'none'}")
    return 0


def _tb_status(args: argparse.Namespace) -> int:
    from owx.thorn.testbed import Testbed, TestbedError

    try:
        print(json.dumps(Testbed(args.name).status(), indent=1))
    except TestbedError as exc:
        print(f"owx thorn testbed status: {exc}", file=sys.stderr)
        return 1
    return 0


def _tb_fault(args: argparse.Namespace) -> int:
    from owx.thorn import faults
    from owx.thorn.netns import NetnsError
    from owx.thorn.setup import SetupError
    from owx.thorn.testbed import Testbed, TestbedError

    tb = Testbed(args.name)
    try:
        if args.kind in ("tor-down", "tor-up"):
            faults.tor(tb, args.target, up=args.kind == "tor-up")
        else:
            node, _, uplink = args.target.partition("/")
            if not uplink:
                raise TestbedError(f"target must be NODE/UPLINK, got {args.target!r}")
            if args.kind in ("link-down", "link-up"):
                faults.link(tb, node, uplink, up=args.kind == "link-up")
            elif args.kind in ("silent", "silent-off"):
                faults.silent(tb, node, uplink, drop=args.kind == "silent")
            else:
                faults.flap(tb, node, uplink, args.count)
    except (TestbedError, NetnsError, SetupError, ThornConfigError) as exc:
        print(f"owx thorn testbed fault: {exc}", file=sys.stderr)
        return 1
    print(f"{args.kind} {args.target}: done")
    return 0

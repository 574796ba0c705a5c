"""``owx disdel``: submit a training job and follow it, read a job's state, or plan one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from owx.disdel.job import JobError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("disdel", help="submit and follow DiSDeL training jobs")
    commands = parser.add_subparsers(dest="disdel_command", required=True)

    submit = commands.add_parser("submit", help="run a job (YAML) through the gateway, with live progress")
    submit.add_argument("job", type=Path, help="job file (YAML)")
    submit.add_argument("--detach", action="store_true", help="print the job id and return once it is planned")
    submit.add_argument("--json", action="store_true", help="print the final state as JSON")
    submit.add_argument("--apihost", help="gateway URL (default: __OW_API_HOST or ~/.wskprops)")
    submit.add_argument("--auth", help="uuid:key (default: __OW_API_KEY or ~/.wskprops)")
    submit.set_defaults(handler=_submit)

    status = commands.add_parser("status", help="the state of a job (also while it runs)")
    status.add_argument("job_id")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=_status)

    estimate = commands.add_parser("estimate", help="the plan a job would get: actions, memory, timeouts, tree")
    estimate.add_argument("job", type=Path)
    estimate.set_defaults(handler=_estimate)


def _fail(message: str) -> int:
    print(f"owx disdel: {message}", file=sys.stderr)
    return 2


def _submit(args: argparse.Namespace) -> int:
    from owx.disdel.gateway import Gateway
    from owx.disdel.progress import follow
    from owx.disdel.sdk import submit
    from owx.gateway.sdk import OwxError

    try:
        gateway = Gateway.connect(args.apihost, args.auth)
        handle = submit(args.job, gateway=gateway)
    except (JobError, OwxError) as exc:
        return _fail(str(exc))
    except Exception as exc:  # gateway unreachable, calibration failed, ...
        return _fail(f"cannot start the job: {exc}")
    print(f"job {handle.job_id}", flush=True)
    if args.detach:
        return 0
    state = follow(handle, quiet=args.json)
    if args.json:
        print(state.model_dump_json(indent=1))
    return 0 if state.status == "succeeded" else 1


def _status(args: argparse.Namespace) -> int:
    from owx.disdel.progress import summary
    from owx.disdel.sdk import status

    try:
        state = status(args.job_id)
    except FileNotFoundError as exc:
        return _fail(str(exc))
    print(state.model_dump_json(indent=1) if args.json else summary(state))
    return 0


def _estimate(args: argparse.Namespace) -> int:
    from owx.disdel.planner import PlanError
    from owx.disdel.sdk import estimate

    try:
        plan = estimate(args.job)
    except (JobError, PlanError) as exc:
        return _fail(str(exc))
    print(json.dumps(plan.model_dump(), indent=1))
    return 0

"""Live progress of a job in the terminal: one bar per training action (epochs), one per aggregator."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from owx.disdel.state import JobState


def summary(state: JobState) -> str:
    """A few lines about a job, for ``owx disdel status``."""
    lines = [f"job {state.job_id}: {state.status}" + (f" ({state.message})" if state.message else "")]
    if state.plan:
        plan = state.plan
        lines.append(f"  plan: {plan.actions} training actions x {plan.train_memory_mb} MB, timeout "
                     f"{plan.train_timeout_ms} ms ({plan.timeout_source}); {len(plan.rounds)} round(s); "
                     f"aggregation levels {plan.levels}")
        lines.append(f"  round {state.round + 1}/{len(plan.rounds)}")
    for action in state.actions.values():
        loss = "" if action.loss is None else f" loss {action.loss:.4f}"
        epochs = f" epoch {action.epoch}/{action.epochs}" if action.role == "train" else ""
        lines.append(f"  {action.key:>6} {action.role:9} {action.status:9}{epochs}{loss} attempts {action.attempts}")
    if state.result:
        r = state.result
        lines.append(f"  result: eval loss {r.eval_loss} accuracy {r.eval_accuracy} in {r.job_time_s:.1f} s, "
                     f"{r.failed_activations} failed activations; model {r.model_path}")
    return "\n".join(lines)


def aggregations(state: JobState) -> int:
    """How many times an aggregator runs: after every round, or once when trainers average between rounds."""
    if state.plan is None or state.plan.averages_in_trainers:
        return 1
    return len(state.plan.rounds)


def follow(handle, quiet: bool = False, interval_s: float = 0.5) -> JobState:  # noqa: ANN001 (JobHandle)
    """Show bars until the job ends; returns its final state."""
    console = Console(stderr=True, quiet=quiet)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[status]}"), TextColumn("{task.fields[loss]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bars:
        tasks: dict[str, int] = {}
        while True:
            state = handle.status()
            for key, action in state.actions.items():
                total = action.epochs if action.role == "train" else aggregations(state)
                if key not in tasks:
                    tasks[key] = bars.add_task(f"{action.role} {key}", total=total, status="", loss="")
                done = action.epoch if action.role == "train" else sum(
                    1 for a in state.activations if a.key == key and a.success)
                loss = "" if action.loss is None else f"loss {action.loss:.4f}"
                bars.update(tasks[key], completed=done, status=action.status, loss=loss)
            if handle.done():
                break
            time.sleep(interval_s)
    state = handle.status()
    console.print(summary(state))
    return state

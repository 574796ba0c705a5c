"""Whether a pid names a live process: a zombie its parent has not reaped yet is not one."""

from __future__ import annotations

from pathlib import Path


def running(pid: int, command: str | None = None) -> bool:
    """True when `pid` is a process that is not a zombie (and, given `command`, runs that program).

    `kill(pid, 0)` succeeds on a zombie, and a killed daemon stays one until its parent reaps it,
    which an init that reaps lazily takes seconds to do."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:][:1]
    return state not in ("Z", "X") and (command is None or name == command)

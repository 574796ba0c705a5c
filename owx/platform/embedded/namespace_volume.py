"""A namespace's directory as a filesystem of its own, so what its actions write there fills its quota.

The directory (Canary's checkpoint store lives there) is writable by every container of its
namespace. On the data dir's own filesystem an action could fill the disk that every tenant's
activation log and databases are on (2 GiB in 3 s). Instead it is an ext4 image of
``sandbox.namespace_dir_mb`` (sparse: it takes only what is written), loop-mounted at the directory
with ``nosuid`` and ``nodev``: a full volume fails that namespace's writes (ENOSPC) and nobody else's.
The image stays in the state dir, so the namespace's files outlive the gateway; a mount a killed
gateway left is used as it is, and a gateway that stops detaches its mounts.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)
MB = 1024 * 1024
DIRECTORY_MODE = 0o2770  # the namespace's group reads and writes; new files keep the group


class VolumeError(RuntimeError):
    pass


def mount(image: Path, directory: Path, size_mb: int, gid: int) -> None:
    """Mount ``image`` at ``directory`` (made first where missing: a sparse ext4 image whose root
    belongs to root and ``gid``); nothing to do where it is mounted already."""
    if os.path.ismount(directory):
        return
    if not image.exists():
        partial = image.with_suffix(".partial")
        with open(partial, "wb") as handle:
            handle.truncate(size_mb * MB)
        partial.chmod(0o600)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-J", "size=4", "-E", f"root_owner=0:{gid}", str(partial)])
        partial.replace(image)
    directory.mkdir(exist_ok=True)
    _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(directory)])
    if (directory / "lost+found").is_dir():
        (directory / "lost+found").rmdir()  # mkfs's, root's alone: nothing of the namespace's
    os.chown(directory, 0, gid)
    directory.chmod(DIRECTORY_MODE)


def detach(directory: Path) -> None:
    """Unmount ``directory`` once no container uses it any more (lazily: they may still)."""
    try:
        _run(["umount", "-l", str(directory)])
    except VolumeError as exc:
        log.warning("could not unmount the namespace volume at %s: %s", directory, exc)


def _run(command: list[str]) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise VolumeError(f"{command[0]} is not installed (apt-get install -y e2fsprogs mount)") from None
    if done.returncode != 0:
        raise VolumeError(f"{' '.join(command[:2])} failed: {done.stderr.strip() or done.stdout.strip()}")

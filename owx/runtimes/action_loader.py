"""Turn the code of an ``/init`` into the action's callable (stdlib only).

Plain source is compiled in memory as module ``main__`` (as OpenWhisk's
Python runtime names it, so ``if __name__ == "__main__"`` blocks stay inert).
A zip is extracted into a fresh directory, which becomes the working directory
and the head of ``sys.path``; its entry is ``__main__.py``. A ``virtualenv/``
in the zip contributes its ``lib/python3.X/site-packages`` (``.pth`` files
honoured) ahead of the interpreter's own packages.
"""

from __future__ import annotations

import linecache
import os
import sys
import types

TYPE_CHECKING = False  # typing costs ~4 ms of start-up; only type checkers need it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Action = Callable[[Any], Any]

MODULE_NAME = "main__"
ENTRY_FILE = "__main__.py"


class ActionLoadError(Exception):
    """The code could not be turned into a callable; the message is the ``{"error"}`` text."""


class UndecodableCode(ActionLoadError):
    """``binary`` code that is not valid base64 (a bad request rather than a bad action)."""


def load_action(code: str, binary: bool, main: str) -> Action:
    """Compile and execute the action's module and return its ``main`` function."""
    if binary:
        workdir = _extract_zip(code)
        source_path = os.path.join(workdir, ENTRY_FILE)
        if not os.path.isfile(source_path):
            raise ActionLoadError(f"Zip file does not include {ENTRY_FILE}")
        with open(source_path, encoding="utf-8") as handle:
            source = handle.read()
        _use_virtualenv(os.path.join(workdir, "virtualenv"))
        sys.path.insert(0, workdir)
        os.chdir(workdir)
    else:
        source_path = os.path.join(os.getcwd(), ENTRY_FILE)
        source = code
        # in-memory source: let tracebacks show its lines
        linecache.cache[source_path] = (len(source), None, source.splitlines(True), source_path)
    module = _execute(source, source_path)
    return _find_main(module, main)


def _execute(source: str, path: str) -> types.ModuleType:
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = path
    sys.modules[MODULE_NAME] = module  # dataclasses, pickle and friends look modules up here
    try:
        exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - running the action is the job
    except BaseException as error:  # SystemExit at import is also a failed init
        sys.modules.pop(MODULE_NAME, None)
        print_traceback()
        raise ActionLoadError(f"Cannot load the action: {type(error).__name__}: {error}") from error
    return module


def _find_main(module: types.ModuleType, main: str) -> Action:
    target: Any = module
    for part in main.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ActionLoadError(f"The action has no function named '{main}'.")
    if not callable(target):
        raise ActionLoadError(f"'{main}' in the action is not a function.")
    return target  # type: ignore[no-any-return]


def _extract_zip(code: str) -> str:
    import base64
    import binascii
    import io
    import tempfile
    import zipfile

    try:
        data = base64.b64decode(code, validate=False)
    except (binascii.Error, ValueError) as error:
        raise UndecodableCode(f"cannot decode the request: {error}") from None
    workdir = tempfile.mkdtemp(prefix="owx-action-")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            archive.extractall(workdir)
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise ActionLoadError(f"Cannot extract the action's zip file: {error}") from None
    return workdir


def _use_virtualenv(venv: str) -> None:
    """Put the virtualenv's site-packages in front of the interpreter's own."""
    lib = os.path.join(venv, "lib")
    if not os.path.isdir(lib):
        return
    import site

    ours = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    versions = sorted(os.listdir(lib), key=lambda name: name != ours)  # our version first
    before = list(sys.path)
    for version in versions:
        site_packages = os.path.join(lib, version, "site-packages")
        if os.path.isdir(site_packages):
            if version != ours:
                print(f"warning: virtualenv has {version} packages, this runtime is {ours}", file=sys.stderr)
            site.addsitedir(site_packages)
    added = [entry for entry in sys.path if entry not in before]
    sys.path[:] = added + before


def print_traceback() -> None:
    """The exception being handled, on stderr (traceback imported only on this error path)."""
    import traceback

    traceback.print_exc(file=sys.stderr)
    sys.stderr.flush()

"""``~/.wskprops``: where ``wsk``, the npm client and the SDK find the apihost and auth."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PATH = Path.home() / ".wskprops"


def read(path: Path = DEFAULT_PATH) -> dict[str, str]:
    """KEY=VALUE lines of a wskprops file ({} when absent)."""
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


CA_KEY = "OWX_CACERT"  # the CA owx's SDK verifies the apihost with (wsk and others ignore the key)


def write_if_free(apihost: str, auth: str, ca: Path | None = None, path: Path = DEFAULT_PATH) -> bool:
    """Write APIHOST, AUTH (and the CA that signed an owx-made certificate) unless the file exists
    with another APIHOST or AUTH; True if written. The file holds a key: mode 0600."""
    current = read(path)
    if current and (current.get("APIHOST"), current.get("AUTH")) != (apihost, auth):
        return False
    lines = [f"APIHOST={apihost}", f"AUTH={auth}", *([f"{CA_KEY}={ca}"] if ca else [])]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return True

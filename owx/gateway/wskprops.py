"""``~/.wskprops``: where ``wsk``, the npm client and the SDK find the apihost and auth."""

from __future__ import annotations

from pathlib import Path

DEFAULT_PATH = Path.home() / ".wskprops"


def read(path: Path = DEFAULT_PATH) -> dict[str, str]:
    """KEY=VALUE lines of a wskprops file ({} when absent)."""
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def write_if_free(apihost: str, auth: str, path: Path = DEFAULT_PATH) -> bool:
    """Write APIHOST and AUTH unless the file exists with other values; True if written."""
    current = read(path)
    if current and (current.get("APIHOST"), current.get("AUTH")) != (apihost, auth):
        return False
    path.write_text(f"APIHOST={apihost}\nAUTH={auth}\n")
    return True

"""The base image: a Debian minbase root filesystem made offline with mmdebstrap.

No registry is reachable, so the root filesystem is bootstrapped from the
machine's Debian mirror and piped straight into ``docker import``. Working
files live on a tmpfs and dpkg skips fsyncs; docs, man pages and locales are
dropped; the host's CA bundle is copied in so HTTPS (pip) works from inside.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip", "ca-certificates")
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
FALLBACK_MIRROR = "http://deb.debian.org/debian"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TMPFS = Path("/dev/shm")
IMAGE_ENV = {
    "LANG": "C.UTF-8",
    "SSL_CERT_FILE": CA_BUNDLE,
    "REQUESTS_CA_BUNDLE": CA_BUNDLE,
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}
_PRUNE_HOOK = (
    'rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/info/* '
    '"$1"/usr/share/locale/* "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*'
)


class RootfsError(RuntimeError):
    """Bootstrapping or importing the root filesystem failed."""


def debian_mirror(sources: Path = DEBIAN_SOURCES, suite: str = SUITE) -> str:
    """The first ``URIs:`` of the deb822 stanza that serves ``suite`` (the machine's mirror)."""
    try:
        text = sources.read_text()
    except OSError:
        return FALLBACK_MIRROR
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, flags=re.MULTILINE))
        if suite in fields.get("Suites", "").split() and fields.get("URIs"):
            return fields["URIs"].split()[0]
    return FALLBACK_MIRROR


def build_base_image(tag: str) -> None:
    """Bootstrap a minbase rootfs with Python and import it into Docker as ``tag``."""
    for tool in ("mmdebstrap", "docker"):
        if shutil.which(tool) is None:
            raise RootfsError(f"{tool} is not installed (apt-get install -y mmdebstrap docker.io)")
    workdir = tempfile.mkdtemp(prefix="owx-rootfs-", dir=TMPFS if TMPFS.is_dir() else None)
    try:
        _bootstrap_into_docker(tag, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _bootstrap_into_docker(tag: str, workdir: str) -> None:
    bootstrap = [
        "mmdebstrap",
        "--variant=minbase",
        "--include=" + ",".join(PACKAGES),
        "--dpkgopt=force-unsafe-io",
        f"--customize-hook={_PRUNE_HOOK}",
        f'--customize-hook=cp {CA_BUNDLE} "$1"{CA_BUNDLE}',
        SUITE,
        "-",
        f"deb {debian_mirror()} {SUITE} main",
    ]
    importer = ["docker", "import"]
    for key, value in IMAGE_ENV.items():
        importer += ["--change", f"ENV {key}={value}"]
    importer += ["-", tag]
    log_path = Path(workdir) / "mmdebstrap.log"
    with open(log_path, "wb") as log:
        producer = subprocess.Popen(
            bootstrap, stdout=subprocess.PIPE, stderr=log, env={**os.environ, "TMPDIR": workdir}
        )
        assert producer.stdout is not None
        consumer = subprocess.run(importer, stdin=producer.stdout, capture_output=True, check=False)
        producer.stdout.close()
        producer.wait()
    if producer.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RootfsError(f"mmdebstrap failed ({producer.returncode}):\n{tail}")
    if consumer.returncode != 0:
        raise RootfsError(f"docker import failed: {consumer.stderr.decode(errors='replace').strip()}")

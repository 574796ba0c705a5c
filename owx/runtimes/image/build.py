"""Build the runtime images locally: ``ensure_image(name)``.

Chain: the base image (Debian minbase + python3, made offline by
:mod:`.rootfs`) ← the runtime image (the proxy modules copied in, the proxy as
``CMD`` on 0.0.0.0:8080) and the TensorFlow runtime image (the same plus
tensorflow-cpu and numpy, pip-installed before the proxy is copied so that
Docker's layer cache keeps them when only the proxy changes).

Idempotent: an existing image is reused unless ``force``. A runtime image is
labelled with a fingerprint of its base image, its Dockerfile and the proxy
sources; when those changed, the image is rebuilt, so an image never runs a
stale proxy. A lock file serialises builds of concurrent callers.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from docker.models.images import Image

from owx.common.dockerd import ensure_dockerd, file_lock

from .rootfs import build_base_image

BASE_IMAGE = "owx/python-base:bookworm"
PYTHON_IMAGE = "owx/python-runtime:latest"
TENSORFLOW_IMAGE = "owx/python-tensorflow-runtime:latest"
RUNTIME_PORT = 8080
FINGERPRINT_LABEL = "owx.runtimes.fingerprint"
OFFERED_LABEL = "owx.runtimes.offered"  # an image the operator offered to blackbox actions

RUNTIMES_DIR = Path(__file__).resolve().parent.parent
IMAGE_ROOT = "/opt/owx"
LOCKFILE = Path(tempfile.gettempdir()) / "owx-runtime-image.lock"
REQUIREMENTS_FILE = "requirements.txt"


class ImageBuildError(RuntimeError):
    """``docker build`` of a runtime image failed."""


@dataclass(frozen=True)
class RuntimeImage:
    """A runtime image: the proxy on the base image, plus pip packages and owx packages its actions import.

    ``requirements`` is the text of a pip requirements file (a derived image's extra packages, e.g.
    what Lithops' workers import); it is installed before the proxy is copied, so Docker's layer
    cache keeps it when only the proxy changes.
    """

    name: str
    pip_packages: tuple[str, ...] = ()
    owx_packages: tuple[str, ...] = ()  # e.g. "disdel": owx/disdel/ is copied in whole
    requirements: str = ""

    def dockerfile(self) -> str:
        lines = [f"FROM {BASE_IMAGE}"]
        pip = "pip install --no-cache-dir --break-system-packages"
        if self.pip_packages:
            packages = " ".join(f"'{package}'" for package in self.pip_packages)
            lines.append(f"RUN {pip} {packages}")
        if self.requirements:
            lines += [f"COPY {REQUIREMENTS_FILE} {IMAGE_ROOT}/{REQUIREMENTS_FILE}",
                      f"RUN {pip} -r {IMAGE_ROOT}/{REQUIREMENTS_FILE}"]
        lines += [
            f"COPY owx {IMAGE_ROOT}/owx",
            f"RUN python3 -m compileall -q {IMAGE_ROOT}",
            f"ENV PYTHONPATH={IMAGE_ROOT}",
            "WORKDIR /action",
            f"EXPOSE {RUNTIME_PORT}",
            f'CMD ["python3", "-m", "owx.runtimes.python_action", "--host", "0.0.0.0", "--port", "{RUNTIME_PORT}"]',
        ]
        return "\n".join(lines) + "\n"


RUNTIME_IMAGES = {
    PYTHON_IMAGE: RuntimeImage(PYTHON_IMAGE),
    TENSORFLOW_IMAGE: RuntimeImage(
        TENSORFLOW_IMAGE,
        ("tensorflow-cpu>=2.15,<3", "numpy", "pydantic>=2.6", "pyyaml"),
        ("disdel", "common", "canary"),  # DiSDeL's training/aggregation actions and their checkpoints
    ),
}


def ensure_image(
    name: str = PYTHON_IMAGE,
    force: bool = False,
    client: docker.DockerClient | None = None,
    progress: Callable[[str], object] | None = None,
) -> Image:
    """Return the image ``name`` (a runtime image or the base image), building what is missing.

    ``force`` rebuilds from scratch: the base image and, for a runtime image, without cache.
    """
    if name != BASE_IMAGE and name not in RUNTIME_IMAGES:
        raise ValueError(f"unknown runtime image {name!r}; known: {', '.join([BASE_IMAGE, *RUNTIME_IMAGES])}")
    if name == BASE_IMAGE:
        client = client or ensure_dockerd()
        with file_lock(LOCKFILE):
            return _ensure_base(client, force, progress or (lambda line: None))
    return ensure_runtime(RUNTIME_IMAGES[name], force, client, progress)


def ensure_runtime(
    spec: RuntimeImage,
    force: bool = False,
    client: docker.DockerClient | None = None,
    progress: Callable[[str], object] | None = None,
) -> Image:
    """Return the runtime image ``spec`` describes (one of :data:`RUNTIME_IMAGES` or a derived one),
    building it, and the base image, when missing or stale."""
    client = client or ensure_dockerd()
    say = progress or (lambda line: None)
    with file_lock(LOCKFILE):
        base = _ensure_base(client, force, say)
        name = spec.name
        fingerprint = _fingerprint(spec, base)
        existing = _find(client, name)
        if existing is not None and not force and existing.labels.get(FINGERPRINT_LABEL) == fingerprint:
            return existing
        say(f"building {name}")
        _docker_build(client, spec, fingerprint, nocache=force, say=say)
        return client.images.get(name)


def derived(name: str, requirements: str) -> RuntimeImage:
    """A runtime image named ``name``: owx's Python runtime plus a pip requirements file's packages."""
    if not requirements.strip():
        raise ValueError("a derived runtime image needs requirements")
    return RuntimeImage(name, requirements=requirements if requirements.endswith("\n") else requirements + "\n")


def add_alias(client: docker.DockerClient, image: Image, alias: str) -> None:
    """Make ``alias`` (an image reference such as ``docker.io/org/name:tag``) name ``image`` locally,
    so an action asking for that image runs this one (there is no registry to pull it from). An image
    owx did not build is offered to blackbox actions this way: the alias names a child of it with
    :data:`OFFERED_LABEL` and no layer of its own."""
    repository, tag = _split_reference(alias)
    if not offered(image.labels):
        dockerfile = f"FROM {image.id}\nLABEL {OFFERED_LABEL}=true\n"
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=f"{repository}:{tag}", rm=True)
    elif not image.tag(repository, tag):
        raise ImageBuildError(f"docker refused the alias {alias}")


def offered(labels: dict[str, str] | None) -> bool:
    """Whether tenants' blackbox actions may run an image with these labels: a runtime owx built (or
    one built from it), or an image the operator aliased (:func:`add_alias`)."""
    return bool(labels and (labels.get(FINGERPRINT_LABEL) or labels.get(OFFERED_LABEL)))


def _split_reference(reference: str) -> tuple[str, str]:
    """``repo[:tag]`` (``latest`` when no tag); a port in the registry part is not a tag."""
    repository, _, tag = reference.rpartition(":")
    if not repository or "/" in tag:
        return reference, "latest"
    return repository, tag


def proxy_sources() -> list[Path]:
    """The modules copied into the images: the proxy itself, not the CLI or the image builder."""
    return sorted(path for path in RUNTIMES_DIR.glob("*.py") if path.name != "cli.py")


def package_sources(spec: RuntimeImage) -> list[Path]:
    """The Python files of the owx packages ``spec`` adds to the proxy."""
    owx_dir = RUNTIMES_DIR.parent
    return sorted(path for package in spec.owx_packages for path in (owx_dir / package).rglob("*.py"))


def _ensure_base(client: docker.DockerClient, force: bool, say: Callable[[str], object]) -> Image:
    if force or _find(client, BASE_IMAGE) is None:
        say(f"bootstrapping {BASE_IMAGE} with mmdebstrap")
        build_base_image(BASE_IMAGE)
    return client.images.get(BASE_IMAGE)


def _find(client: docker.DockerClient, name: str) -> Image | None:
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def _fingerprint(spec: RuntimeImage, base: Image) -> str:
    digest = hashlib.sha256(base.id.encode())
    digest.update(spec.dockerfile().encode())
    digest.update(spec.requirements.encode())
    for path in proxy_sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for path in package_sources(spec):
        digest.update(str(path.relative_to(RUNTIMES_DIR.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _build_context(spec: RuntimeImage) -> io.BytesIO:
    """An in-memory tar: the Dockerfile and an ``owx`` package holding only the proxy."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        _add_file(tar, "Dockerfile", spec.dockerfile().encode())
        if spec.requirements:
            _add_file(tar, REQUIREMENTS_FILE, spec.requirements.encode())
        _add_file(tar, "owx/__init__.py", b'"""owx, as much of it as an action runtime image needs."""\n')
        for path in proxy_sources():
            _add_file(tar, f"owx/runtimes/{path.name}", path.read_bytes())
        for path in package_sources(spec):
            _add_file(tar, f"owx/{path.relative_to(RUNTIMES_DIR.parent)}", path.read_bytes())
    buffer.seek(0)
    return buffer


def _add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _docker_build(
    client: docker.DockerClient, spec: RuntimeImage, fingerprint: str, nocache: bool, say: Callable[[str], object]
) -> None:
    stream = client.api.build(
        fileobj=_build_context(spec),
        custom_context=True,
        tag=spec.name,
        labels={FINGERPRINT_LABEL: fingerprint},
        nocache=nocache,
        rm=True,
        forcerm=True,
        pull=False,
        decode=True,
    )
    log: list[str] = []
    for chunk in stream:
        if "error" in chunk:
            raise ImageBuildError(f"building {spec.name} failed: {chunk['error']}\n" + "".join(log[-20:]))
        line = chunk.get("stream", "")
        if line:
            log.append(line)
            if line.strip():
                say(line.rstrip())

"""What an operator applies to run owx in front of OpenWhisk on Kubernetes: valid manifests whose
commands are owx's own, and an image that builds offline and runs them."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from owx.cli import build_parser

CONFIG = Path(__file__).resolve().parents[2] / "openwhisk_config"
MANIFESTS = sorted((CONFIG / "kubernetes").glob("*.yaml"))
KUBERNETES = "1.30.0"


def documents() -> list[tuple[str, dict]]:
    return [(path.name, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_every_manifest_is_valid_against_kubernetes_schemas() -> None:
    assert {p.name for p in MANIFESTS} >= {"owx-gateway.yaml", "owx-escra.yaml", "owx-thorn.yaml",
                                           "owx-checkpoints.yaml"}
    for name, doc in documents():
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises with the path of what is wrong
        assert doc["metadata"].get("namespace") == "openwhisk", name


def _containers() -> list[tuple[str, dict]]:
    found = []
    for name, doc in documents():
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        found += [(name, c) for c in spec.get("containers", []) if c["image"].startswith("owx/")]
    return found


def test_the_owx_commands_in_the_manifests_parse() -> None:
    containers = _containers()
    assert len(containers) == 4  # gateway, allocator, agent, thorn
    for name, container in containers:
        argv = container.get("args") or shlex.split(container["command"][-1])[2:]  # "exec owx thorn run ..."
        argv = [a.replace("$(NODE_NAME)", "n") for a in argv]
        build_parser(argv[0]).parse_args(argv)  # exits (fails the test) on an unknown option


def test_the_thorn_node_descriptions_are_valid() -> None:
    from owx.thorn.model import NodeSpec

    (config,) = [doc for _, doc in documents() if doc["kind"] == "ConfigMap" and "thorn" in doc["metadata"]["name"]]
    for key, text in config["data"].items():
        node = NodeSpec.model_validate(yaml.safe_load(text))
        assert key == f"{node.name}.yaml"


@pytest.mark.slow
@pytest.mark.docker
def test_the_owx_image_builds_offline_and_runs_owx(tmp_path: Path) -> None:
    from owx.common.dockerd import ensure_dockerd
    from owx.runtimes.image.build import BASE_IMAGE, ensure_image

    client = ensure_dockerd()
    ensure_image(BASE_IMAGE, client=client)
    root = CONFIG.parent
    tag = "owx/owx:test"
    build = subprocess.run(["docker", "build", "-q", "-f", str(CONFIG / "image" / "Dockerfile"), "--build-arg",
                            f"BASE={BASE_IMAGE}", "-t", tag, str(root)], capture_output=True, text=True, timeout=1200)
    assert build.returncode == 0, build.stderr[-3000:]
    shown = subprocess.run(["docker", "run", "--rm", tag, "agent", "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "--controller" in shown.stdout, shown.stderr

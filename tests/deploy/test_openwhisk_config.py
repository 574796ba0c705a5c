"""The OpenWhisk deployment files stay in step with the kinds and images owx serves."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from owx.gateway.models import PYTHON_KINDS

CONFIG = Path(__file__).resolve().parents[2] / "openwhisk_config"


def test_runtimes_manifest_covers_every_python_kind():
    manifest = json.loads((CONFIG / "runtimes.json").read_text())
    kinds = {entry["kind"] for entry in manifest["runtimes"]["python"]}
    assert kinds == set(PYTHON_KINDS) - {"python:default"}  # python:default resolves to the default entry
    assert sum(entry["default"] for entry in manifest["runtimes"]["python"]) == 1
    images = {f"{e['image']['prefix']}/{e['image']['name']}" for e in manifest["runtimes"]["python"]}
    assert images == {"owx/python-runtime", "owx/python-tensorflow-runtime"}


def test_helm_values_parse_and_raise_limits():
    values = yaml.safe_load((CONFIG / "values.yaml").read_text())
    assert values["whisk"]["runtimes"] == "runtimes.json"
    assert values["whisk"]["limits"]["actions"]["memory"]["max"].endswith("g")
    assert values["invoker"]["containerFactory"]["impl"] == "docker"

"""Upstream names are the documented, deterministic ones: every owx in front of the upstream, and
every restart, finds the same deployment; a new revision or new limits is a new one."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from owx.platform.openwhisk import naming
from owx.platform.openwhisk.naming import upstream_name
from owx.platform.types import ActionSpec


def documented_digest(spec: ActionSpec) -> str:
    deployed = [spec.key, spec.kind, spec.code, spec.binary, spec.main, spec.image, spec.memory_mb,
                spec.timeout_ms, spec.logs_bytes, spec.concurrency]
    return hashlib.sha256(json.dumps(deployed, separators=(",", ":")).encode()).hexdigest()[:12]


def test_names_are_the_documented_hash_and_follow_revisions_and_limits():
    spec = ActionSpec(key="alice/tools/resize@3-9f", kind="python:3", code="def main(a):\n    return a\n")
    name = upstream_name("owx", spec)
    assert (name.package, name.action) == ("owx-alice", f"tools.resize@{documented_digest(spec)}")
    assert upstream_name("owx", dataclasses.replace(spec)) == name  # an equal spec, built anew
    for changed in (dataclasses.replace(spec, key="alice/tools/resize@4-01"), dataclasses.replace(spec, memory_mb=512)):
        other = upstream_name("owx", changed)
        assert other.action == f"tools.resize@{documented_digest(changed)}" != name.action


def test_the_digest_memo_keeps_no_more_code_than_its_budget():
    """A tenant deploying many large revisions evicts memoised digests; it never grows the gateway."""
    memo = naming._DigestMemo(max_code_chars=10)
    first, second = ("a@1", "x" * 6), ("a@2", "y" * 6)
    digest = memo.digest(first, 6)
    assert memo.digest(second, 6) != digest
    assert memo._held == 6 and list(memo._digests) == [second]  # the older one went
    assert memo.digest(("a@3", "z" * 11), 11) and memo._held == 6  # larger than the budget: not kept
    assert memo.digest(first, 6) == digest  # hashed again, the same name


def test_a_namespace_too_long_for_an_upstream_name_gets_a_package_of_its_own_within_it():
    """OpenWhisk refuses a name segment over 256 characters (the stand-in answered 'Name segement
    longer than allowed: 260 > 256' to every deploy of a 256-character namespace, found by a probe)."""
    long_a, long_b = "a" * 250 + "x" * 6, "a" * 250 + "y" * 6
    packages = {naming.package_of("owx", ns) for ns in (long_a, long_b)}
    assert len(packages) == 2 and all(len(p) == 256 for p in packages)
    assert all(p.startswith("owx-aaaa") for p in packages)
    assert naming.package_of("owx", "alice") == "owx-alice"  # short ones as documented

"""Settings of the platform: where activations run (``OWX_PLATFORM__<FIELD>``, ``OWX_UPSTREAM__<FIELD>``)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator

PlatformKind = Literal["embedded", "docker", "openwhisk"]


class SandboxSettings(BaseModel):
    """The sandbox of every local container (``OWX_PLATFORM__SANDBOX__<FIELD>``)."""

    tmp_mb: int = Field(256, ge=1, description="size of a container's /tmp, its only writable place (also "
                        "HOME and the working directory); its pages count against the container's memory")
    namespace_dir_mb: int = Field(1024, ge=0, description="size of each namespace's directory (Canary's checkpoint "
                                  "store), a volume of its own so that its actions cannot fill the data dir's disk "
                                  "(0: a plain directory, without a quota)")
    uid_base: int = Field(2_000_000, ge=65_536, description="first uid of the range containers get uids from "
                          "(one per container, never 0, outside the range of the host's own users)")
    uid_count: int = Field(1 << 20, ge=1024, description="size of the container uid range")
    gid_base: int = Field(4_000_000, ge=65_536, description="first gid of the range namespaces get gids from "
                          "(one per namespace, kept in the instance's state dir)")
    gid_count: int = Field(1 << 20, ge=1024, description="size of the namespace gid range")
    expose: list[Path] = Field([], description="more host paths containers see read-only (besides /usr, /etc, "
                               "the interpreter and owx)")
    host_ports: list[int] = Field([], description="TCP ports of services on this machine that local containers may "
                                  "reach besides the gateway's own and a configured Canary store's (say, a Redis "
                                  "Lithops' functions use); every other port of this machine is closed to them")
    shared: list[Path] = Field([], description="host directories every container sees read-write at the same place "
                               "(all tenants share them: for trusted use on one machine, such as DiSDeL's job "
                               "directory or Canary's blob directory; make them writable for the containers' uids)")


class PlatformSettings(BaseModel):
    """The embedded platform's nodes, pools and runtimes (``kind`` picks the platform)."""

    kind: PlatformKind = Field(
        "embedded", description="embedded: Python kinds as sandboxed processes, blackbox in Docker when it is there; "
        "docker: every action in Docker; openwhisk: an upstream OpenWhisk (see upstream)")
    nodes: int = Field(1, ge=1, description="invoker pools on this machine, each with its own cgroup parent")
    user_memory_mb: int = Field(2048, ge=128, description="memory budget of each node's container pool")
    stem_cells: int = Field(2, ge=0, description="prewarmed python containers per node")
    starts_per_tenant: int = Field(0, ge=0, description="container starts (made and initialised) of one tenant "
                                   "at once on a node, its others waiting for one of them to end; 0: twice the "
                                   "machine's cores (more at once end none sooner: see start_turns)")
    stem_memory_mb: int = Field(256, ge=128, description="memory of a prewarmed stem cell (OpenWhisk's prewarm)")
    idle_evict_s: float = Field(600.0, gt=0, description="idle warm containers are removed after this")
    pause_grace_s: float = Field(0.05, ge=0, description="a warm container idle this long is paused (every process "
                                 "of it frozen) until its next activation, as OpenWhisk's invoker pauses idle "
                                 "containers after its pause grace; 0: never paused")
    fair_keep_idle_s: float = Field(
        30.0, ge=0, description="while the node's memory is contended, an idle container of a tenant holding less "
        "than the one asking is kept from its eviction for this long after its last run (its next call stays warm)")
    cgroup_root: str | None = Field(
        None, description="cgroup under which this instance's containers live; unset: owx-<hash of the data dir>, "
        "so that instances never share one (what a killed predecessor left there is reaped at start)")
    state_dir: Path | None = Field(
        None, description="where the platform keeps its sockets and namespace directories (root only); "
        "unset: <data_dir>/platform")
    sandbox: SandboxSettings = SandboxSettings()
    runtime_image: str = Field("owx/python-runtime:latest", description="image of Python kinds on Docker")
    blackbox_images: list[str] = Field(
        [], description="images (shell patterns of references, e.g. 'myorg/*') blackbox actions may run besides "
        "the runtime images owx built (and those built from them) and the images named by owx runtime alias; any "
        "other image of this machine is answered as a failed pull, as an image no registry has: a tenant runs "
        "nothing the operator did not offer")
    runtime_python: str = Field(sys.executable, description="interpreter of the process backend's runtimes")
    zygote: bool = Field(True, description="start process runtimes by forking a preloaded runtime process "
                         "(owx.runtimes.zygote) instead of starting an interpreter each time")
    zygote_preload: list[str] = Field(
        ["numpy", "redis", "owx.canary.checkpoint"],
        description="modules the zygote imports once for every runtime it forks (missing ones are skipped)",
    )
    zygote_kind_preload: dict[str, list[str]] = Field(
        {},
        description="kinds with a zygote of their own, and the modules it imports besides the common ones "
        "(started at the kind's first container; until it is ready the common zygote forks the kind), e.g. "
        '{"python:tensorflow": ["tensorflow"]}. Off by default: what the zygote imported is charged to its '
        "cgroup, not the containers', so their measured peaks drop by it (DiSDeL calibrates from those peaks)",
    )
    user_cpus: float | None = Field(
        None, gt=0,
        description="CPUs shared by a node's containers; when set, each container gets a CFS quota of "
        "user_cpus * memory / user_memory (OpenWhisk's userCpus). Unset: shares only, as OpenWhisk's default.",
    )
    pids_max: int = Field(1024, ge=16, description="pids limit of each container")
    sentinel_wait_s: float = Field(2.0, gt=0, description="how long to wait for log sentinels after a run")


def for_instance(settings: PlatformSettings, data_dir: Path) -> PlatformSettings:
    """``settings`` with the instance's own cgroup root and state dir, derived from its data dir unless configured."""
    data_dir = data_dir.expanduser().absolute()
    tag = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return settings.model_copy(update={"cgroup_root": settings.cgroup_root or f"owx-{tag}",
                                       "state_dir": settings.state_dir or data_dir / "platform"})


class UpstreamSettings(BaseModel):
    """The OpenWhisk that runs every activation when ``platform.kind`` is ``openwhisk``."""

    model_config = ConfigDict(hide_input_in_errors=True)  # its errors never print a key

    url: HttpUrl | None = Field(None, description="the upstream API host, e.g. https://openwhisk.example:443")
    auth: str | None = Field(None, description="uuid:key of the upstream namespace owx deploys into")
    insecure: bool = Field(False, description="accept a self-signed upstream certificate")
    namespace: str = Field("_", description="the upstream namespace (_ = the auth key's own)")
    prefix: str = Field("owx", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$",
                        description="first part of every package owx creates upstream")
    user_memory_mb: int = Field(
        2048, ge=128, description="memory the upstream's invokers give owx's actions in all (its userMemory); "
        "Canary's gang admission plans against it")
    timeout_s: float = Field(10.0, gt=0, description="time allowed for one upstream API call (not the activation)")
    poll_s: float = Field(0.05, gt=0, description="first interval between polls for a non-blocking result")
    retry_s: float = Field(
        60.0, ge=0, description="how long an activation owx accepted keeps being sent again while the upstream "
        "refuses it without running it (throttled: 429, unavailable: 503, unreachable), before it is recorded "
        "as failed with the upstream's status (0: at once)")
    keep_alive: bool = Field(True, description="reuse connections to the upstream (off: a new connection per call)")
    accounts: dict[str, str] = Field(
        {}, description="owx namespaces with an upstream namespace of their own: namespace -> uuid:key. Their "
        "invocations are deployed and run there, so the upstream throttles each of them alone; the others share "
        "owx's key (auth), and its throttles")

    @field_validator("auth")
    @classmethod
    def _uuid_key(cls, value: str | None) -> str | None:
        if value is not None:
            _check_key(value)
        return value

    @field_validator("accounts")
    @classmethod
    def _account_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for auth in value.values():
            _check_key(auth)
        return value


def _check_key(auth: str) -> None:
    if ":" not in auth or not all(auth.split(":", 1)):
        raise ValueError("an upstream key must be uuid:key")

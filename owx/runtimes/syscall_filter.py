"""The seccomp filter of a tenant's runtime: a few calls the namespaces and the uid do not cover.

- user namespaces (``clone``/``unshare`` with ``CLONE_NEWUSER``) are refused: inside one a tenant
  would hold every capability again over new mount and network namespaces, a large kernel surface;
- ``clone3`` answers ENOSYS (its flags sit behind a pointer a filter cannot read; glibc then
  falls back to ``clone``, which is checked);
- the kernel keyrings (``add_key``, ``request_key``, ``keyctl``) are refused: they are per uid and
  not namespaced;
- any other architecture is killed (the 32-bit and x32 tables would bypass the numbers below).
"""

from __future__ import annotations

import errno
import platform
import struct

CLONE_NEWUSER = 0x10000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000
LD_ABS_W, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
ARCH_OFFSET, NR_OFFSET, ARG0_OFFSET = 4, 0, 16
X32_BIT = 0x40000000

_TABLES = {  # audit arch, syscall numbers
    "x86_64": (0xC000003E, {"clone": 56, "unshare": 272, "clone3": 435, "add_key": 248, "request_key": 249,
                            "keyctl": 250}),
    "aarch64": (0xC00000B7, {"clone": 220, "unshare": 97, "clone3": 435, "add_key": 217, "request_key": 218,
                             "keyctl": 219}),
}


def tenant_filter(machine: str | None = None) -> bytes:
    """The filter as ``struct sock_filter`` records for this machine's architecture."""
    arch, nr = _TABLES[machine or platform.machine()]
    program: list[tuple] = [
        ("ld", ARCH_OFFSET), ("jeq", arch, None, "kill"),
        ("ld", NR_OFFSET),
        ("jge", X32_BIT, "enosys", None),
        ("jeq", nr["clone3"], "enosys", None),
        ("jeq", nr["unshare"], "flags", None),
        ("jeq", nr["clone"], "flags", None),
        ("jeq", nr["add_key"], "eperm", None),
        ("jeq", nr["request_key"], "eperm", None),
        ("jeq", nr["keyctl"], "eperm", None),
        ("ret", RET_ALLOW),
        ("label", "flags"), ("ld", ARG0_OFFSET), ("jset", CLONE_NEWUSER, "eperm", None), ("ret", RET_ALLOW),
        ("label", "eperm"), ("ret", RET_ERRNO | errno.EPERM),
        ("label", "enosys"), ("ret", RET_ERRNO | errno.ENOSYS),
        ("label", "kill"), ("ret", RET_KILL_PROCESS),
    ]
    return _assemble(program)


def _assemble(program: list[tuple]) -> bytes:
    labels: dict[str, int] = {}
    for op in program:
        if op[0] == "label":
            labels[op[1]] = sum(1 for o in program[: program.index(op)] if o[0] != "label")
    code = []
    for op in program:
        if op[0] == "label":
            continue
        here = len(code)
        if op[0] == "ld":
            code.append(struct.pack("HBBI", LD_ABS_W, 0, 0, op[1]))
        elif op[0] == "ret":
            code.append(struct.pack("HBBI", RET, 0, 0, op[1]))
        else:
            kind, value, if_true, if_false = op
            jump = {"jeq": JEQ, "jge": JGE, "jset": JSET}[kind]
            offset = [0 if target is None else labels[target] - here - 1 for target in (if_true, if_false)]
            code.append(struct.pack("HBBI", jump, offset[0], offset[1], value))
    return b"".join(code)

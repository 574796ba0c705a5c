"""Small eBPF programs without a compiler or libbpf: their instructions, loading them, attaching them
to a cgroup (the ``bpf(2)`` calls through ctypes).

A program here is a handful of instructions written out with :func:`insn`; the kernel's verifier
checks it at :func:`load` and its log is in the error when it refuses one.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from pathlib import Path

PROG_TYPE_CGROUP_SOCK_ADDR = 18
ATTACH_CGROUP_INET4_BIND = 8
ATTACH_CGROUP_INET6_BIND = 9

# Instruction codes (class | operation | source), as in linux/bpf.h and linux/bpf_common.h.
LDX_W = 0x61  # dst = *(u32 *)(src + off)
JEQ_IMM = 0x15  # if dst == imm: skip off instructions
MOV64_IMM = 0xB7  # dst = imm
EXIT = 0x95  # return r0

_PROG_LOAD, _PROG_ATTACH = 5, 8
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_LOG_BYTES = 16 * 1024

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _ProgLoad(ctypes.Structure):
    _fields_ = [("prog_type", ctypes.c_uint32), ("insn_cnt", ctypes.c_uint32), ("insns", ctypes.c_uint64),
                ("license", ctypes.c_uint64), ("log_level", ctypes.c_uint32), ("log_size", ctypes.c_uint32),
                ("log_buf", ctypes.c_uint64), ("kern_version", ctypes.c_uint32), ("prog_flags", ctypes.c_uint32),
                ("prog_name", ctypes.c_char * 16), ("prog_ifindex", ctypes.c_uint32),
                ("expected_attach_type", ctypes.c_uint32)]


class _ProgAttach(ctypes.Structure):
    _fields_ = [("target_fd", ctypes.c_uint32), ("attach_bpf_fd", ctypes.c_uint32),
                ("attach_type", ctypes.c_uint32), ("attach_flags", ctypes.c_uint32)]


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One instruction (``struct bpf_insn``): ``code`` on registers ``dst`` and ``src``."""
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise OSError(0, f"bpf(2) is not known on {platform.machine()}")
    result = _libc.syscall(ctypes.c_long(number), ctypes.c_int(cmd), ctypes.byref(attr),
                           ctypes.c_uint(ctypes.sizeof(attr)))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def load(prog_type: int, attach_type: int, program: bytes, name: str) -> int:
    """Load ``program`` (instructions) for ``attach_type``; the descriptor of the loaded program."""
    code = ctypes.create_string_buffer(program, len(program))
    license_ = ctypes.create_string_buffer(b"Apache-2.0")
    log = ctypes.create_string_buffer(_LOG_BYTES)
    attr = _ProgLoad(prog_type=prog_type, insn_cnt=len(program) // 8, insns=ctypes.addressof(code),
                     license=ctypes.addressof(license_), log_level=1, log_size=_LOG_BYTES,
                     log_buf=ctypes.addressof(log), prog_name=name.encode()[:15],
                     expected_attach_type=attach_type)
    try:
        return _bpf(_PROG_LOAD, attr)
    except OSError as exc:
        verifier = log.value.decode(errors="replace").strip()
        raise OSError(exc.errno, f"loading BPF program {name}: {exc.strerror}" +
                      (f" ({verifier})" if verifier else "")) from None


def attach_to_cgroup(prog_fd: int, group: Path, attach_type: int) -> None:
    """Attach program ``prog_fd`` to the v2 cgroup directory ``group`` for ``attach_type``: it runs for
    every process in the group and the groups below it, until the group is removed."""
    target = os.open(group, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _bpf(_PROG_ATTACH, _ProgAttach(target_fd=target, attach_bpf_fd=prog_fd, attach_type=attach_type))
    except OSError as exc:
        raise OSError(exc.errno, f"attaching a BPF program to {group}: {exc.strerror}") from None
    finally:
        os.close(target)

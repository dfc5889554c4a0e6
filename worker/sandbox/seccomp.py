"""A seccomp filter that refuses new user namespaces inside the sandbox (issue 24).

A command with a user namespace of its own may mount, and reaches kernel code an
unprivileged process otherwise cannot. bubblewrap's `--disable-userns` needs the sandbox in
a user namespace, which a root worker's sandbox is not (it drops to the sandbox's user with
setpriv), so both kinds of worker load this classic BPF program (`bwrap --seccomp FD`):
`unshare` and `clone` with CLONE_NEWUSER fail with EPERM; `clone3`, whose flags a filter
cannot read, fails with ENOSYS, so the C library falls back to `clone` (as Flatpak does).
"""

from __future__ import annotations

import platform
import struct

CLONE_NEWUSER = 0x10000000
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
#: the x32 ABI's syscall numbers carry this bit on x86_64
_X32 = 0x40000000
#: machine -> its ABIs: (AUDIT_ARCH, unshare, clone, clone3)
ABIS = {
    "x86_64": ((0xC000003E, 272, 56, 435), (0x40000003, 310, 120, 435)),
    "aarch64": ((0xC00000B7, 97, 220, 435), (0x40000028, 337, 120, 435)),
}

# classic BPF opcodes
_LD_W_ABS, _ALU_AND_K, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x54, 0x15, 0x45, 0x06


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one), or None where it is not known."""
    abis = ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    out: list[bytes] = [_insn(_LD_W_ABS, 4)]  # seccomp_data.arch
    for arch, unshare, clone, clone3 in abis:
        out.append(_insn(_JEQ_K, arch, 0, 10))  # another ABI: on to the reload ending this block
        out.append(_insn(_LD_W_ABS, 0))  # seccomp_data.nr
        out.append(_insn(_ALU_AND_K, ~_X32 & 0xFFFFFFFF))
        out.append(_insn(_JEQ_K, clone3, 5, 0))
        out.append(_insn(_JEQ_K, unshare, 1, 0))
        out.append(_insn(_JEQ_K, clone, 0, 4))
        out.append(_insn(_LD_W_ABS, 16))  # the low half of args[0]: the flags
        out.append(_insn(_JSET_K, CLONE_NEWUSER, 0, 2))
        out.append(_insn(_RET_K, _ERRNO | EPERM))
        out.append(_insn(_RET_K, _ERRNO | ENOSYS))
        out.append(_insn(_RET_K, _ALLOW))
        out.append(_insn(_LD_W_ABS, 4))  # reload the arch for the next block
    out.append(_insn(_RET_K, _ALLOW))
    return b"".join(out)

"""Landlock through raw syscalls (ctypes, stdlib only).

This file is also loaded, as source, into the zygote inside the sandbox (the system interpreter
there has no third-party packages), so it imports nothing outside the standard library.
Landlock restricts the calling process and all its future children, even root, and cannot be
lifted: filesystem access is limited to the listed paths, TCP bind/connect is denied
(ABI >= 4), and abstract unix sockets and signals cannot reach outside the domain (ABI >= 6).
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86_64, arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is unavailable."""
    try:
        r = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return int(r) if r > 0 else 0


def fs_rights(abi: int) -> int:
    """All filesystem access rights the given ABI knows."""
    rights = (1 << 13) - 1  # EXECUTE .. MAKE_SYM (ABI 1)
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock {what}: {os.strerror(err)}")
    return result


def restrict_self(
    read_paths: list[str],
    write_paths: list[str],
    device_paths: list[str] = (),
    list_paths: list[str] = (),
) -> dict[str, int]:
    """Confine this process (and its future children) to the given paths.

    read_paths: read and execute; write_paths: full access (scratch dirs); device_paths:
    read and write files only (e.g. /dev/null); list_paths: list directories only. Missing
    paths are skipped. Returns what was enforced: {"abi", "fs", "net", "scoped"}; raises
    OSError when Landlock is unavailable.
    """
    libc = _libc()
    abi = abi_version()
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    fs = fs_rights(abi)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("=QQQ", fs, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(libc.syscall(_SYS_CREATE_RULESET, buf, ctypes.c_size_t(size), 0), "create")
    try:
        rules = [(p, READ) for p in read_paths]
        rules += [(p, fs) for p in write_paths]
        rules += [(p, READ_FILE | WRITE_FILE | (IOCTL_DEV & fs)) for p in device_paths]
        rules += [(p, READ_DIR) for p in list_paths]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= _FILE_ONLY
                rule = ctypes.create_string_buffer(struct.pack("=Qi", access & fs, fd), 12)
                _check(libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0), path)
            finally:
                os.close(fd)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _check(libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0), "restrict_self")
    finally:
        os.close(ruleset)
    return {"abi": abi, "fs": fs, "net": net, "scoped": scoped}

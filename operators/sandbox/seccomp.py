"""The sandbox's syscall filter, compiled to BPF on the host with libseccomp (PyPI `pyseccomp`).

bubblewrap loads it (`--seccomp FD`) right before it executes the zygote, so it binds the zygote
and every process it forks. Default allow; denied with EPERM: debugging/introspection of other
processes (ptrace, process_vm_*), namespace and mount manipulation (unshare, setns, mount,
clone with CLONE_NEW*), kernel attack surface that untrusted code never needs (bpf,
perf_event_open, userfaultfd, io_uring, keyrings, modules, kexec), SysV/POSIX IPC (state that
would outlive a run), sockets other than AF_UNIX, and terminal injection (TIOCSTI).
Other architectures' syscall ABIs (e.g. i386 `int 0x80`) kill the process.
"""

from __future__ import annotations

import errno
import functools
import socket
import tempfile

DENIED = (
    "ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd "
    "unshare setns mount umount2 pivot_root chroot move_mount open_tree fsopen fsmount fsconfig "
    "fspick mount_setattr open_by_handle_at name_to_handle_at "
    "bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register "
    "keyctl add_key request_key init_module finit_module delete_module kexec_load "
    "kexec_file_load reboot swapon swapoff acct quotactl syslog settimeofday clock_settime "
    "clock_adjtime adjtimex personality fanotify_init lookup_dcookie iopl ioperm "
    "shmget shmat shmdt shmctl msgget msgsnd msgrcv msgctl semget semop semtimedop semctl "
    "mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr "
    "vmsplice move_pages migrate_pages mbind set_mempolicy"
).split()
NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
TIOCSTI = 0x5412


def available() -> str | None:
    """None when the filter can be built here, else why not."""
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"seccomp (PyPI pyseccomp + libseccomp2): {exc}"
    return None


@functools.lru_cache(maxsize=1)
def filter_bpf() -> bytes:
    """The compiled filter (a raw BPF program for this machine's architecture)."""
    import pyseccomp as sc

    flt = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            flt.add_rule(deny, name)
        except (ValueError, OSError):
            pass  # not a syscall on this architecture
    for flag in NAMESPACE_FLAGS:
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes flags in memory a filter cannot read: make libc fall back to clone.
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    flt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
    with tempfile.TemporaryFile() as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        return fh.read()

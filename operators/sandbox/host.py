"""What the host must provide, and the command that starts one sandbox slot.

Layers of a slot (all required for isolation "full"; `check_host` names the missing ones):
bubblewrap (user, mount, PID, network, IPC, UTS, cgroup namespaces; read-only /usr; private
tmpfs scratch; cleared environment; no new privileges; no capabilities; nested user
namespaces disabled), a world-readable system interpreter (a non-root uid cannot run one under
/root), seccomp (libseccomp via pyseccomp), Landlock (kernel), and unprivileged user
namespaces (the slot drops to its own non-root host uid before bwrap starts).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from operators.sandbox import landlock, seccomp

INTERPRETERS = ("/usr/bin/python3", "/usr/local/bin/python3")
SCRATCH = "/tmp"
SHM = "/dev/shm"
DEVICES = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
_MODULES = ("landlock", "harness", "zygote")


def find_interpreter() -> str | None:
    """A Python >= 3.9 that any uid can execute, with a world-readable stdlib."""
    for path in INTERPRETERS:
        real = Path(path).resolve()
        try:
            mode = real.stat().st_mode
        except OSError:
            continue
        if mode & stat.S_IXOTH and all(_world_traversable(p) for p in real.parents):
            return path
    return None


def _world_traversable(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & stat.S_IXOTH)
    except OSError:
        return False


def bwrap_path() -> str | None:
    """The bubblewrap binary, if installed."""
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")


def userns_available() -> bool:
    """Whether unprivileged users may create user namespaces here."""
    try:
        if int(Path("/proc/sys/user/max_user_namespaces").read_text()) <= 0:
            return False
    except (OSError, ValueError):
        return False
    knob = Path("/proc/sys/kernel/unprivileged_userns_clone")
    return not knob.exists() or knob.read_text().strip() == "1"


def check_host() -> list[str]:
    """Isolation layers this host lacks (empty: everything isolation "full" needs is here)."""
    missing = []
    if bwrap_path() is None:
        missing.append("bubblewrap (apt-get install bubblewrap; scripts/install-system-deps.sh)")
    if not userns_available():
        missing.append("unprivileged user namespaces (sysctl user.max_user_namespaces > 0)")
    if find_interpreter() is None:
        missing.append("a world-readable system python3 (apt-get install python3)")
    problem = seccomp.available()
    if problem:
        missing.append(problem)
    if landlock.abi_version() < 1:
        missing.append("Landlock (kernel >= 5.13 with landlock in the lsm= list)")
    return missing


def module_sources() -> dict[str, str]:
    """Source of the stdlib-only modules that run inside the sandbox."""
    here = Path(__file__).parent
    return {name: (here / f"{name}.py").read_text() for name in _MODULES}


BOOTSTRAP = """\
import json, sys, types
def _load(name, src):
    mod = types.ModuleType(name)
    mod.__file__ = "<" + name + ">"
    sys.modules[name] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod
_cfg, _src = json.loads(sys.argv[1]), json.loads(sys.argv[2])
_m = {k: _load("rldag_sandbox_" + k, v) for k, v in _src.items()}
del _src
_m["zygote"].main(_cfg, _m["harness"], _m["landlock"])
"""


def interpreter_argv(interpreter: str, cfg: dict, sources: dict[str, str]) -> list[str]:
    """`python3 -I -c BOOTSTRAP CFG SOURCES`: loads the inside modules and starts the zygote."""
    import json

    return [interpreter, "-I", "-B", "-c", BOOTSTRAP, json.dumps(cfg), json.dumps(sources)]


def bwrap_argv(bwrap: str, seccomp_fd: int, scratch_bytes: int) -> list[str]:
    """bubblewrap options of a slot; the interpreter command follows."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1"]
    argv += ["--new-session", "--clearenv", "--hostname", "sandbox", "--cap-drop", "ALL"]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": SCRATCH,
        "TMPDIR": SCRATCH,
        "LANG": "C.UTF-8",
        "USER": "sandbox",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):
        target = Path("/") / name
        if target.is_symlink():
            argv += ["--symlink", os.readlink(target), f"/{name}"]
        elif target.is_dir():
            argv += ["--ro-bind", str(target), f"/{name}"]
    for name in ("ld.so.cache", "localtime", "alternatives"):
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(scratch_bytes), "--tmpfs", SCRATCH]
    argv += ["--size", str(scratch_bytes), "--tmpfs", SHM]
    argv += ["--chdir", SCRATCH, "--seccomp", str(seccomp_fd)]
    return argv


def landlock_paths() -> dict[str, list[str]]:
    """Landlock rules inside a slot (paths as seen inside)."""
    return {
        "read_paths": ["/usr", "/etc", "/proc", "/bin", "/lib", "/lib64", "/sbin"],
        "write_paths": [SCRATCH, SHM],
        "device_paths": DEVICES,
        "list_paths": ["/"],
    }

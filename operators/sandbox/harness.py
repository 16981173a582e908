"""What a forked run does inside the sandbox (stdlib only; loaded as source into the zygote).

The child of the zygote: new session, fresh stdio, every other descriptor closed, rlimits
applied, then the untrusted program runs in a fresh `__main__`. For assert-style tests it then
evaluates *probes* - the sub-expressions of the asserts that need the program (e.g.
`f(2)` of `assert f(2) == 4`) - and writes each value, encoded as tagged JSON of plain data,
to fd 3. The host compares those values with the expected ones, which never enter the sandbox.
A program can write to fd 3 too, or patch this harness: it can then claim values, but not learn
the expected ones, so it cannot forge a pass it could not have earned by computing them.
"""

from __future__ import annotations

import builtins
import ctypes
import gc
import io
import json
import linecache
import os
import resource
import signal
import sys
import traceback
import types

RESULT_FD = 3
_MB = 1 << 20
EXIT_HARNESS_FAILURE = 70
_PR_SET_DUMPABLE = 4
_PRCTL = ctypes.CDLL(None).prctl
_ENCODING = {"encoding": "utf-8", "errors": "backslashreplace"}


def encode(value: object, depth: int = 0) -> object:
    """Plain data -> JSON-able tagged form; only exact builtin types (no subclasses)."""
    if depth > 100:
        raise ValueError("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is int or t is float or t is str:
        return value
    d = depth + 1
    if t is list or t is tuple or t is set or t is frozenset:
        tag = {list: "l", tuple: "t", set: "s", frozenset: "fs"}[t]
        return {tag: [encode(v, d) for v in value]}
    if t is dict:
        return {"d": [[encode(k, d), encode(v, d)] for k, v in value.items()]}
    if t is bytes or t is bytearray:
        return {"b" if t is bytes else "ba": value.hex()}
    if t is complex:
        return {"c": [value.real, value.imag]}
    raise TypeError(f"cannot report a value of type {t.__name__}")


def _apply_limits(cfg: dict) -> None:
    cpu = max(1, int(cfg["cpu_seconds"] + 0.999))
    limits = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_AS: (cfg["memory_mb"] * _MB,) * 2,
        resource.RLIMIT_NPROC: (cfg["nproc"],) * 2,
        resource.RLIMIT_FSIZE: (cfg["max_file_mb"] * _MB,) * 2,
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_NOFILE: (256, 256),
        resource.RLIMIT_MSGQUEUE: (0, 0),
        resource.RLIMIT_MEMLOCK: (0, 0),
    }
    for which, value in limits.items():
        resource.setrlimit(which, value)


def _setup_stdio(stdin: bytes, out_w: int, err_w: int, res_w: int) -> None:
    if stdin:
        fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
        os.write(fd, stdin)
        os.lseek(fd, 0, os.SEEK_SET)
    else:
        fd = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.dup2(res_w, RESULT_FD, inheritable=False)
    os.closerange(RESULT_FD + 1, 1 << 16)
    # The wrappers made by prepare() in the zygote (empty buffers) now write to the new fds.
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__


def prepare() -> None:
    """Called once in the zygote before it serves: stdio wrappers over fds 0-2 (never written
    by the zygote), inside modules hidden from sys.modules, and a warm-up run of this file's
    code so that caches are filled once here instead of copied-on-write in every child."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), **_ENCODING)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), **_ENCODING)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), line_buffering=True, **_ENCODING
    )
    for name in [n for n in sys.modules if n.startswith("rldag_sandbox_")]:
        del sys.modules[name]
    job = {
        "mode": "asserts",
        "program": "def f(n):\n    return sum(range(n))\n",
        "probes": [["eval", "f(10)"], ["eval", "[f(1), (2.5,), {1: 'a'}]"], ["exec", "1 / 0"]],
    }
    null = os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC)
    try:
        saved = sys.modules.get("__main__")
        _run(json.loads(json.dumps(job)), null)
        traceback.format_exception(ValueError("warm-up"))
        if saved is not None:
            sys.modules["__main__"] = saved
    finally:
        os.close(null)


def _fresh_main(program: str) -> dict:
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    linecache.cache["<program>"] = (len(program), None, program.splitlines(True), "<program>")
    return main.__dict__


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_probes(job: dict, g: dict, fd: int) -> None:
    write, dumps = os.write, json.dumps
    for i, (kind, src) in enumerate(job.get("probes", ())):
        try:
            if kind == "eval":
                value = eval(compile(src, "<test>", "eval"), g)  # noqa: S307 - sandboxed
                line = f"{i}\tok\t{dumps(encode(value))}\n"
            else:
                exec(compile(src, "<test>", "exec"), g)  # noqa: S102 - sandboxed
                line = f"{i}\tok\tnull\n"
        except BaseException as exc:  # noqa: BLE001 - any failure fails the test
            line = f"{i}\texc\t{dumps(type(exc).__name__)}\n"
        try:
            write(fd, line.encode("utf-8", "backslashreplace"))
        except OSError:
            return


def _print_exception(exc: BaseException) -> None:
    """Print a traceback without the harness's own frame."""
    traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)


def _run(job: dict, fd: int = RESULT_FD) -> int:
    program = job["program"]
    g = _fresh_main(program)
    try:
        exec(compile(program, "<program>", "exec"), g)  # noqa: S102 - sandboxed
    except SystemExit as exc:
        if job["mode"] != "asserts":
            return _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001
        _print_exception(exc)
        return 1
    if job["mode"] != "asserts":
        return 0
    setup = job.get("setup") or ""
    if setup.strip():
        try:
            exec(compile(setup, "<tests>", "exec"), g)  # noqa: S102 - sandboxed
        except BaseException as exc:  # noqa: BLE001
            _print_exception(exc)
            return 1
    _run_probes(job, g, fd)
    return 0


def run_child(job_bytes: memoryview, cfg: dict, out_w: int, err_w: int, res_w: int) -> None:
    """Body of a forked run; never returns (ends with os._exit)."""
    code = EXIT_HARNESS_FAILURE
    try:
        os.setsid()
        # The zygote is non-dumpable; the run itself may read its own /proc/self (seccomp still
        # forbids ptrace and process_vm_readv, and it shares the zygote's memory only as a copy).
        _PRCTL(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        try:  # under memory pressure the kernel kills a run before its zygote
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")
        except OSError:
            pass
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        job = json.loads(bytes(job_bytes))
        _setup_stdio(job.get("stdin", "").encode("utf-8", "surrogatepass"), out_w, err_w, res_w)
        os.chdir(cfg["scratch"])
        _apply_limits(cfg)
        sys.argv = ["<program>"]
        gc.enable()
        code = _run(job)
    except BaseException:  # noqa: BLE001
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code)

"""Attack suite, part 2: processes, resources, descriptors and the zygote itself.

Each test checks the effect on the host: no process outlives its run, host canaries and
sibling runs survive, host memory is not flooded, nothing of one run is readable by the next.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from textwrap import dedent

import pytest

from operators.sandbox import Sandbox, TestSpec
from tests.support.sandbox import LIMITS, assert_only_zygotes_left, marker, processes_with

BOUND = LIMITS.wall_seconds + 3.0  # a run must come back within this, whatever it does


def timed(sandbox: Sandbox, program: str, **kw):
    t0 = time.monotonic()
    res = sandbox.run(program, **kw)
    return res, time.monotonic() - t0


def test_fork_bomb_is_bounded_and_leaves_nothing(sandbox: Sandbox) -> None:
    tag = marker()
    program = dedent(f"""
        import os, time
        n = 0
        while True:
            try:
                if os.fork() == 0:
                    os.execv("/usr/bin/sleep", ["sleep", "30", "{tag}"])
                n += 1
            except OSError as e:
                print("fork refused after", n, e, flush=True)
                time.sleep(5)
    """)
    res, took = timed(sandbox, program)
    assert took < BOUND and res.exec_status == "timeout"
    assert "fork refused after" in res.stdout
    assert int(res.stdout.split("after")[1].split()[0]) <= LIMITS.max_processes
    assert processes_with(tag) == []
    assert_only_zygotes_left()
    assert sandbox.run("print('alive')").stdout == "alive\n"


def test_memory_bomb_is_capped(sandbox: Sandbox) -> None:
    rss0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    program = dedent("""
        import mmap
        chunks, got = [], 0
        try:
            while got < 4096:
                chunks.append(bytearray(16 << 20))
                got += 16
        except MemoryError:
            print("capped at", got, "MB", flush=True)
        try:
            m = mmap.mmap(-1, 1 << 30)
            m[:: 4096] = b"x" * (1 << 18)
            print("MAPPED 1 GB")
        except Exception as e:
            print("mmap refused", type(e).__name__)
    """)
    res, took = timed(sandbox, program)
    assert took < BOUND
    assert "capped at" in res.stdout and "MAPPED" not in res.stdout
    assert int(res.stdout.split("capped at")[1].split()[0]) < LIMITS.memory_mb
    assert res.max_rss_kb < LIMITS.memory_mb * 1024
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss <= max(rss0, 1 << 20)


def test_disk_bomb_is_capped(sandbox: Sandbox) -> None:
    program = dedent("""
        written = 0
        try:
            with open("/tmp/big", "wb") as fh:
                while written < 1 << 30:
                    fh.write(b"x" * (1 << 20))
                    written += 1 << 20
        except BaseException as e:
            print("stopped at", written >> 20, type(e).__name__, flush=True)
    """)
    res, took = timed(sandbox, program)
    assert took < BOUND
    stopped = res.stdout + res.stderr
    assert "SIGXFSZ" in stopped or res.exit_code == -25 or "stopped at" in stopped


def test_infinite_loop_times_out(sandbox: Sandbox) -> None:
    res, took = timed(sandbox, "while True:\n    pass\n")
    assert res.exec_status == "timeout" and took < BOUND
    assert res.exec_seconds <= LIMITS.wall_seconds + 0.5


def test_sleeping_past_timeout_ignoring_sigterm_is_killed(sandbox: Sandbox) -> None:
    tag = marker()
    program = dedent(f"""
        import os, signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen(["python3", "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
            "{tag}"])
        time.sleep(60)
    """)
    res, took = timed(sandbox, program)
    assert res.exec_status == "timeout" and took < BOUND
    assert processes_with(tag) == []
    assert_only_zygotes_left()


def test_200mb_of_stdout_is_cut_without_buffering_it(sandbox: Sandbox) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    program = (
        "import sys\nblock = 'A' * (1 << 20)\nfor _ in range(200):\n    sys.stdout.write(block)\n"
    )
    res, took = timed(sandbox, program)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert res.exec_status == "killed" and "output limit" in res.detail
    assert len(res.stdout) <= LIMITS.max_output_bytes
    assert grown_mb < 50 and took < BOUND


def test_double_forked_setsid_orphan_does_not_outlive_the_run(solo: Sandbox) -> None:
    tag = marker()
    program = dedent(f"""
        import os
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/usr/bin/python3", ["python3", "-c",
                    "import time\\nwhile True:\\n open('/tmp/orphan-alive','w').write('1')\\n "
                    "time.sleep(0.05)", "{tag}"])
            os._exit(0)
        os.wait()
        import time
        deadline = time.monotonic() + 1.2  # within the 1.5 s wall: its interpreter may start slowly
        while not os.path.exists("/tmp/orphan-alive") and time.monotonic() < deadline:
            time.sleep(0.02)
        print(os.path.exists("/tmp/orphan-alive"))
    """)
    res = solo.run(program)
    assert res.exec_status == "ok" and res.stdout == "True\n"  # the orphan did start
    assert processes_with(tag) == []
    assert_only_zygotes_left()
    later = solo.run("import os, time\ntime.sleep(0.2)\nprint(os.listdir('/tmp'))")
    assert later.stdout == "[]\n"


def test_cannot_kill_host_canary_sibling_or_zygote(sandbox: Sandbox, canary) -> None:
    sibling: dict = {}

    def run_sibling() -> None:
        sibling["res"] = sandbox.run("import time\ntime.sleep(0.8)\nprint('sibling ok')")

    thread = threading.Thread(target=run_sibling)
    thread.start()
    time.sleep(0.2)
    program = dedent(f"""
        import os, signal
        for target in (-1, 1, {canary.pid}, {os.getpid()}, *range(2, 4000)):
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGINT):
                try:
                    os.kill(target, sig)
                except OSError:
                    pass
        os.system("kill -9 -1; pkill -9 python3; pkill -9 sleep")
        print("done")
    """)
    res = sandbox.run(program)
    thread.join()
    assert canary.poll() is None and processes_with(canary.tag) == [canary.pid]
    assert sibling["res"].stdout == "sibling ok\n", sibling["res"]
    assert res.exec_status in ("ok", "killed")  # it may kill itself
    assert [r.stdout for r in sandbox.run_many([("print(1)",), ("print(2)",)])] == ["1\n", "2\n"]


def test_ctypes_libc_system_stays_inside(sandbox: Sandbox) -> None:
    tag = marker()
    program = dedent(f"""
        import ctypes
        libc = ctypes.CDLL(None)
        print(libc.system(b"id; touch /work/main/{tag} /root/{tag}; cat /etc/shadow; echo END"))
    """)
    res = sandbox.run(program)
    assert "END" in res.stdout and "uid=0" not in res.stdout and "root:" not in res.stdout
    assert not os.path.exists(f"/work/main/{tag}") and not os.path.exists(f"/root/{tag}")


def test_nested_user_namespaces_are_refused(sandbox: Sandbox) -> None:
    program = dedent("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        for flag in (0x10000000, 0x10000000 | 0x20000, 0x40000000):
            print("unshare", libc.unshare(flag), ctypes.get_errno())
        os.system("unshare -Ur id; unshare -Urn --mount-proc id; bwrap --bind / / id")
        print("uid", os.getuid())
    """)
    res = sandbox.run(program)
    assert res.stdout.count("unshare -1") == 3
    assert "uid=0" not in res.stdout and "uid 0" not in res.stdout


def test_inherited_descriptors_hold_nothing_and_cannot_corrupt_the_pipe(
    sandbox: Sandbox, tmp_path
) -> None:
    secret = marker()
    (tmp_path / "secret").write_text(secret)
    fd = os.open(tmp_path / "secret", os.O_RDONLY)
    os.set_inheritable(fd, True)
    program = dedent("""
        import os, struct
        print(sorted(os.listdir("/proc/self/fd")))
        fake = b'{"status":"ok","exit_code":0,"signal":null,"seconds":0,"lens":[0,0,0]}'
        frame = struct.pack(">II", 4 + len(fake), len(fake)) + fake
        for fd in range(3, 1024):
            try:
                os.lseek(fd, 0, 0)
                print(fd, os.read(fd, 1 << 16))
            except OSError:
                pass
            try:
                os.write(fd, frame * 10)
            except OSError:
                pass
    """)
    try:
        with Sandbox(LIMITS, concurrency=1) as fresh:
            res = fresh.run(program)
            after = fresh.run("def f(x):\n    return x + 1", TestSpec(asserts="assert f(1) == 2"))
            wrong = fresh.run("def f(x):\n    return x", TestSpec(asserts="assert f(1) == 2"))
    finally:
        os.close(fd)
    assert secret not in res.stdout
    assert res.stdout.startswith("['0', '1', '2', '3', '4']")  # 4: the listdir itself
    assert (after.tests_passed, wrong.tests_passed) == (1, 0)


def test_zygote_memory_and_previous_runs_are_unreadable(solo: Sandbox) -> None:
    secret = marker().split("-")[-1]
    prefix = "ZYGLEAK"
    first = dedent(f"""
        import sys
        data = sys.stdin.read()
        s = "{prefix}" + "{secret}"
        print("{prefix}" + data[::-1])
        print(s)  # into the zygote's output buffer
    """)
    solo.run(first, stdin="." * 100_000 + prefix + secret + "\n")  # longer than later jobs
    solo.run(first, TestSpec(asserts=f"assert '{prefix}{secret}' == s"))
    program = dedent(f"""
        import ctypes, gc, os, re, sys
        pat = re.compile(b"{prefix}" + b"[0-9a-f]{{8}}")
        hits = set()
        def scan(pid):
            try:
                maps, mem = open(f"/proc/{{pid}}/maps"), open(f"/proc/{{pid}}/mem", "rb", 0)
                with maps, mem:
                    for line in maps:
                        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                        try:
                            mem.seek(lo)
                            hits.update(pat.findall(mem.read(hi - lo)))
                        except (OSError, OverflowError, ValueError):
                            pass
            except OSError as e:
                print("no access", pid, e)
        scan("self")
        scan(1)
        for o in gc.get_objects():
            if isinstance(o, (str, bytes)) and "{prefix}".encode()[:3] in str(o).encode():
                hits.update(pat.findall(str(o).encode()))
        f = sys._getframe()
        while f:
            hits.update(pat.findall(repr(f.f_locals).encode()))
            f = f.f_back
        libc = ctypes.CDLL(None, use_errno=True)
        print("ptrace", libc.ptrace(16, 1, 0, 0), ctypes.get_errno())
        print(sorted(hits))
    """)
    res = solo.run(program)
    assert "no access 1" in res.stdout and "ptrace -1" in res.stdout
    assert secret[:8] not in res.stdout and secret[::-1][:8] not in res.stdout


@pytest.mark.slow
def test_many_attacks_in_a_row_leave_the_pool_healthy(sandbox: Sandbox) -> None:
    bad = ["while True: pass", "import os\nwhile True: os.fork()", "print('x' * 10**8)"]
    results = sandbox.run_many([(p,) for p in bad * 2])
    assert all(r.exec_status in ("timeout", "killed", "error") for r in results)
    assert_only_zygotes_left()
    ok = sandbox.run_many([("print(6 * 7)",)] * 8)
    assert [r.stdout for r in ok] == ["42\n"] * 8


def test_forked_memory_hogs_are_capped_together(sandbox: Sandbox) -> None:
    program = dedent("""
        import os, time
        for _ in range(8):
            if os.fork() == 0:
                try:
                    hog = bytearray(120 << 20)
                    hog[::4096] = b"x" * len(hog[::4096])
                    print("hog", os.getpid(), flush=True)
                except MemoryError:
                    pass
                time.sleep(5)
                os._exit(0)
        time.sleep(5)
    """)
    res, took = timed(sandbox, program)
    assert res.exec_status == "killed" and "memory limit" in res.detail, res
    assert res.stdout.count("hog") <= LIMITS.memory_mb // 120 + 1 and took < BOUND
    assert_only_zygotes_left()

"""Attack suite, part 1: network, filesystem, environment and secrets.

Each test checks on the host that the attack had no effect (no connection arrived, no file
appeared, the secret never came out), not merely that the program failed.
"""

from __future__ import annotations

import ast
import os
import socket
from pathlib import Path
from textwrap import dedent

from operators.sandbox import IOCase, Sandbox, TestSpec
from tests.support.paths import ROOT
from tests.support.sandbox import LIMITS, Listener, host_ip, marker


def test_tcp_to_host_loopback_service_gets_no_connection(sandbox: Sandbox) -> None:
    server = Listener(socket.AF_INET, ("127.0.0.1", 0))
    try:
        program = dedent(f"""
            import socket, subprocess
            for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
                try:
                    socket.create_connection((host, {server.port}), timeout=0.3)
                    print("CONNECTED", host)
                except Exception as e:
                    print("blocked", host, e)
            subprocess.run(["bash", "-c", "echo x > /dev/tcp/127.0.0.1/{server.port}"])
            subprocess.run(["python3", "-c", "import socket; socket.create_connection("
                            "('127.0.0.1', {server.port}), timeout=0.3)"])
        """)
        res = sandbox.run(program)
    finally:
        server.close()
    assert server.connections == 0
    assert "CONNECTED" not in res.stdout
    assert "blocked 127.0.0.1" in res.stdout  # the attack really ran


def test_outbound_tcp_reaches_nothing(sandbox: Sandbox) -> None:
    server = Listener(socket.AF_INET, ("0.0.0.0", 0))
    ip = host_ip()
    try:
        program = dedent(f"""
            import socket
            for addr in (("{ip}", {server.port}), ("1.1.1.1", 80), ("pypi.org", 443)):
                try:
                    socket.create_connection(addr, timeout=0.3)
                    print("CONNECTED", addr)
                except Exception as e:
                    print("blocked", addr, type(e).__name__)
            try:
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                print("CONNECTED raw")
            except Exception as e:
                print("blocked raw", e)
        """)
        res = sandbox.run(program)
    finally:
        server.close()
    assert server.connections == 0
    assert "CONNECTED" not in res.stdout and res.stdout.count("blocked") == 4


def test_abstract_and_path_unix_sockets_of_host_unreachable(sandbox: Sandbox, tmp_path) -> None:
    name = marker()
    abstract = Listener(socket.AF_UNIX, "\0" + name)
    path = f"/tmp/{name}.sock"
    on_disk = Listener(socket.AF_UNIX, path)
    try:
        program = dedent(f"""
            import socket
            for addr in ("\\0{name}", "{path}"):
                try:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(addr)
                    print("CONNECTED")
                except Exception as e:
                    print("blocked", type(e).__name__)
        """)
        res = sandbox.run(program)
    finally:
        abstract.close()
        on_disk.close()
        os.unlink(path)
    assert abstract.connections == 0 and on_disk.connections == 0
    assert res.stdout.count("blocked") == 2


SEARCH = dedent("""
    import os, sys
    needle = NEEDLE
    hits = []
    for root, dirs, files in os.walk("/", onerror=lambda e: None):
        if root.startswith(("/proc", "/sys", "/usr", "/dev")):
            dirs[:] = []
            continue
        for f in files:
            try:
                with open(os.path.join(root, f), "rb") as fh:
                    data = fh.read(1 << 20)
            except Exception:
                continue
            if needle.encode() in data:
                hits.append(os.path.join(root, f))
    for p in TARGETS:
        try:
            print(p, open(p).read())
        except Exception as e:
            print("denied", p, type(e).__name__)
    print("hits", hits)
""")


def test_secret_files_shadow_and_harness_files_are_invisible(sandbox: Sandbox, tmp_path) -> None:
    secret = marker()
    planted = [Path("/root") / f"{marker()}.txt", tmp_path / "expected_answers.json"]
    for p in planted:
        p.write_text(f"SECRET {secret}\n")
    shadow = Path("/etc/shadow").read_text()
    root_hash = shadow.split("\n")[0]
    targets = [*map(str, planted), "/etc/shadow", "/proc/1/root/etc/shadow"]
    targets += [str(ROOT / "operators/sandbox/judge.py"), "/work/shared/NOTES.md"]
    program = SEARCH.replace("NEEDLE", repr(secret)).replace("TARGETS", repr(targets))
    try:
        res = sandbox.run(program + "import ctypes\nctypes.CDLL(None).system(b'cat /etc/shadow')")
    finally:
        for p in planted:
            p.unlink()
    out = res.stdout + res.stderr
    assert secret not in out and "hits []" in out
    assert root_hash not in out and "root:" not in out
    assert "def judge" not in out
    assert out.count("denied") == len(targets)


def test_expected_stdout_never_enters_the_sandbox(sandbox: Sandbox) -> None:
    expected = marker()
    program = dedent("""
        import os, re
        found = set()
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if "r" not in line.split()[1] or hi - lo > 1 << 28:
                    continue
                try:
                    mem.seek(lo)
                    chunk = mem.read(hi - lo)
                except OSError:
                    continue
                found.update(re.findall(rb"rldag-attack-[0-9a-f]{32}", chunk))
        for f in found:
            print(f.decode())
    """)
    res = sandbox.run(program, TestSpec(io=(IOCase("hello\n", expected),)))
    assert res.exec_status == "ok"
    assert expected not in res.stdout and res.tests_passed == 0


def test_host_environment_is_not_inherited(monkeypatch) -> None:
    secret = marker()
    monkeypatch.setenv("RLDAG_ATTACK_SECRET", secret)
    program = dedent("""
        import os
        print(dict(os.environ))
        for p in ("/proc/self/environ", "/proc/1/environ", "/proc/1/cmdline"):
            try:
                print(open(p, "rb").read())
            except Exception as e:
                print("denied", p, e)
        os.system("env; cat /proc/*/environ")
    """)
    with Sandbox(LIMITS, concurrency=1) as sb:
        res = sb.run(program)
    assert secret not in res.stdout + res.stderr
    assert "HOME" in res.stdout  # the program did print its environment


def test_writes_outside_scratch_do_not_reach_the_host(sandbox: Sandbox) -> None:
    tag = marker()
    targets = [ROOT / f"{tag}", Path("/root") / tag, Path("/etc") / tag, Path("/tmp") / tag]
    targets += [Path("/var/tmp") / tag, Path("/dev/shm") / tag, Path("/usr") / tag]
    program = dedent(f"""
        import os
        for p in {[str(t) for t in targets]!r}:
            try:
                with open(p, "w") as fh:
                    fh.write("pwned")
                print("wrote", p)
            except Exception as e:
                print("denied", p, type(e).__name__)
        os.system("touch {ROOT}/{tag}-sh /root/{tag}-sh")
        open("/tmp/{tag}-scratch", "w").write("ok")
        print(os.listdir("/tmp"))
    """)
    res = sandbox.run(program)
    for t in targets:
        assert not t.exists(), t
    assert not (ROOT / f"{tag}-sh").exists() and not Path(f"/root/{tag}-sh").exists()
    assert not Path(f"/tmp/{tag}-scratch").exists()
    assert f"{tag}-scratch" in res.stdout  # scratch itself is writable


def test_nothing_persists_in_tmp_or_dev_shm_across_runs(solo: Sandbox) -> None:
    tag = marker()
    plant = dedent(f"""
        import os, ctypes
        for d in ("/tmp", "/dev/shm"):
            open(f"{{d}}/{tag}", "w").write("x")
            os.makedirs(f"{{d}}/{tag}-dir/a/b")
            open(f"{{d}}/{tag}-dir/a/b/f", "w").write("x")
            os.chmod(f"{{d}}/{tag}-dir/a", 0)
            os.mkfifo(f"{{d}}/{tag}-fifo")
            os.symlink("/etc", f"{{d}}/{tag}-link")
        libc = ctypes.CDLL(None, use_errno=True)
        print("shmget", libc.shmget(0x1234, 4096, 0o1666))
        print(sorted(os.listdir("/tmp")))
    """)
    first = solo.run(plant)
    assert f"{tag}-fifo" in first.stdout and "shmget -1" in first.stdout
    check = dedent("""
        import os, subprocess
        print(os.listdir("/tmp"), os.listdir("/dev/shm"))
        print(subprocess.run(["cat", "/proc/sysvipc/shm"], capture_output=True).stdout)
    """)
    second = solo.run(check)
    assert tag not in second.stdout
    assert second.stdout.startswith("[] []")


def test_proc_of_other_processes_is_invisible(sandbox: Sandbox, canary) -> None:
    program = dedent(f"""
        import os
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        print("pids", pids, flush=True)
        for pid in [*pids, {canary.pid}, {os.getpid()}]:
            for name in ("cmdline", "environ", "status"):
                try:
                    print(pid, name, open(f"/proc/{{pid}}/{{name}}", "rb").read()[:2000])
                except OSError as e:
                    print(pid, name, "denied", type(e).__name__, flush=True)
        os.system("ps aux 2>&1; cat /proc/*/cmdline")
    """)
    res = sandbox.run(program)
    assert canary.tag not in res.stdout + res.stderr
    visible = ast.literal_eval(res.stdout.split("pids ", 1)[1].split("\n", 1)[0])
    assert visible and max(visible) < 100 and len(visible) <= 4  # zygote, run, its children
    assert f"{canary.pid} cmdline denied" in res.stdout


def test_uncleanable_scratch_recycles_the_slot(solo: Sandbox) -> None:
    program = (
        "import os\nfor _ in range(1500):\n    os.mkdir('a')\n    os.chdir('a')\nprint('deep')"
    )
    deep = solo.run(program)
    assert deep.stdout == "deep\n" and "recycled" in deep.detail
    after = solo.run("import os\nprint(os.listdir('/tmp'))")
    assert after.stdout == "[]\n"

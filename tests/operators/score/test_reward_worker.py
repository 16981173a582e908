"""The forked reward worker: calls that hang are stopped after their timeout (with whatever
they started), a call that kills its process fails only its row, outcomes match calling the
function in-process, and a worker does not outlive the process that forked it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from operators.score.reward_call import RewardOutcome, call_rewards
from operators.score.reward_worker import ForkedRewardCalls
from operators.score.rewards.arithmetic import compute_score
from tests.support.paths import ROOT


def _gone(pid: int) -> bool:
    """True when `pid` no longer runs (reaped, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(pid)


def _rows(*responses: str) -> list[tuple]:
    return [("arithmetic", r, "3", '{"index": 1}') for r in responses]


def test_outcomes_equal_calling_the_function_in_process():
    rows = _rows(*(str(i % 7) for i in range(300)), "03", "x", "3<eos>")
    calls = ForkedRewardCalls(compute_score, 5.0)
    try:
        assert list(calls(rows)) == list(call_rewards(compute_score, rows))
        assert list(calls(rows[:3])) == [RewardOutcome(0.0), RewardOutcome(0.0), RewardOutcome()]
    finally:
        calls.close()


def hang_on_loop(data_source, solution_str, ground_truth, extra_info):
    """Spins forever (pure Python, never releases anything) on 'loop'; naps on 'nap'."""
    while solution_str == "loop":
        pass
    if solution_str == "nap":
        time.sleep(0.05)  # longer than FLUSH_S: its outcome is sent before the next call
    return float(solution_str == ground_truth)


def test_a_hung_call_is_stopped_and_the_rows_after_it_are_scored():
    calls = ForkedRewardCalls(hang_on_loop, 0.3)
    start = time.monotonic()
    try:
        outcomes = list(calls(_rows("3", "1", "loop", "3", "loop", "2")))
    finally:
        calls.close()
    assert time.monotonic() - start < 5
    assert [o.score for o in outcomes] == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    errors = [o.error for o in outcomes]
    assert errors[2] == errors[4] == "timed out after 0.3 s (the call was stopped)"
    assert [e for i, e in enumerate(errors) if i not in (2, 4)] == [""] * 4
    assert calls.restarts == 2


def die(data_source, solution_str, ground_truth, extra_info):
    """Kills its own process with the signal named by the response, e.g. 'SIGSEGV'."""
    if solution_str.startswith("SIG"):
        os.kill(os.getpid(), signal.Signals[solution_str])
    if solution_str == "exit":
        os._exit(7)
    return 1.0


def test_a_call_that_kills_its_process_fails_only_its_row():
    calls = ForkedRewardCalls(die, 5.0)
    try:
        outcomes = list(calls(_rows("a", "SIGSEGV", "b", "exit", "c")))
    finally:
        calls.close()
    assert [o.score for o in outcomes] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert outcomes[1].error == "the reward worker process died (killed by SIGSEGV)"
    assert outcomes[3].error == "the reward worker process died (exit code 7)"


def start_sleeper_and_hang(data_source, solution_str, ground_truth, extra_info):
    """Starts `sleep 60`, writes its pid to the file named by the response, then hangs."""
    child = subprocess.Popen(["sleep", "60"])
    Path(solution_str).write_text(str(child.pid))
    while True:
        time.sleep(0.01)


def test_stopping_a_hung_call_kills_the_processes_it_started(tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    calls = ForkedRewardCalls(start_sleeper_and_hang, 0.5)
    try:
        (outcome,) = calls(_rows(str(pid_file)))
    finally:
        calls.close()
    assert outcome.error.startswith("timed out after 0.5 s")
    assert _wait_gone(int(pid_file.read_text()), 5)


def test_closing_the_outcomes_early_stops_a_busy_worker():
    calls = ForkedRewardCalls(hang_on_loop, 30.0)
    outcomes = calls(_rows("nap", "loop"))
    start = time.monotonic()
    assert next(outcomes) == RewardOutcome(0.0)
    assert time.monotonic() - start < 5  # not held back by the hung call after it
    worker = calls._process.pid
    outcomes.close()  # the fail policy stops reading after the first error
    assert _wait_gone(worker, 5)


def test_the_worker_exits_when_the_process_that_forked_it_is_killed(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        from operators.score.reward_worker import ForkedRewardCalls
        from operators.score.rewards.arithmetic import compute_score
        calls = ForkedRewardCalls(compute_score, 5.0)
        list(calls([("arithmetic", "3", "3", None)]))
        print(calls._process.pid, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    worker = int(parent.stdout.readline())
    assert not _gone(worker)
    parent.kill()  # SIGKILL: no atexit, no cleanup in the parent
    parent.wait()
    assert _wait_gone(worker, 5)

"""The run's progress bar is refreshed at most once a second, and always at the end."""

from __future__ import annotations

from types import SimpleNamespace

from flows import artifacts


def test_progress_updates_are_throttled_but_the_last_one_always_goes(monkeypatch):
    sent: list[float] = []
    described: list[str] = []

    def update(aid: str, value: float, description: str) -> None:
        sent.append(value)
        described.append(description)

    monkeypatch.setattr(artifacts, "create_progress_artifact", lambda **kw: "artifact-id")
    monkeypatch.setattr(artifacts, "update_progress_artifact", update)
    clock = iter([0.0, 0.2, 0.5, 1.3, 1.4, 1.5]).__next__
    monkeypatch.setattr(artifacts.time, "monotonic", clock)
    spec = SimpleNamespace(iterations=6)
    run = SimpleNamespace(loaded=SimpleNamespace(spec=spec), run_id="r", uri="file:///r")
    progress = artifacts.Progress(run)
    for done in range(1, 7):
        progress.update(done, in_flight=1 if done < 6 else 0, staleness=1.0)
    # t=0 goes, 0.2/0.5 are too soon, 1.3 (>= 1 s later) goes, 1.4 too soon, the last always
    assert sent == [100 * 1 / 6, 100 * 4 / 6, 100.0]
    assert described[1] == "4/6 iterations of r, 1 more in flight, staleness 1"

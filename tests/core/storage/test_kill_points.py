"""The chaos harness's kill points (rldag/storage/kill_points.py) and what a kill leaves: a
process SIGKILLed mid-Parquet write leaves its temporary file, never a torn table, and
`Storage.remove_temporaries` (run by a resume) removes it."""

from __future__ import annotations

import signal
import subprocess
import sys

import pyarrow as pa
import pytest

from rldag.storage.kill_points import ENV, _target
from rldag.storage.store import TMP_PREFIX, Storage
from tests.support.paths import ROOT

WRITE_TWO = """
import pyarrow as pa
from rldag.storage.store import Storage
storage = Storage({root!r})
storage.write_table("run/iter=0/a.parquet", pa.table({{"x": [1]}}))
storage.write_table("run/iter=0/b.parquet", pa.table({{"x": [2]}}))
"""


def test_a_kill_mid_parquet_write_leaves_only_a_temporary_file_the_resume_removes(tmp_path):
    code = WRITE_TWO.format(root=str(tmp_path))
    killed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), ENV: "parquet:2"},
        start_new_session=True,  # the kill point acts only in its process group's leader
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "chaos: killed at parquet:2 run/iter=0/b.parquet" in killed.stderr
    temporary, whole = sorted(p.name for p in (tmp_path / "run" / "iter=0").iterdir())
    assert whole == "a.parquet"  # no b.parquet, torn or whole
    assert temporary.startswith(TMP_PREFIX) and temporary.endswith("-b.parquet")

    storage = Storage(str(tmp_path))
    assert storage.remove_temporaries("run") == [f"iter=0/{temporary}"]
    assert [p.name for p in (tmp_path / "run" / "iter=0").iterdir()] == ["a.parquet"]
    assert storage.read_table("run/iter=0/a.parquet").equals(pa.table({"x": [1]}))
    assert storage.remove_temporaries("run") == []
    assert storage.remove_temporaries("no-such-run") == []


def test_unset_it_does_nothing_and_a_wrong_value_is_refused():
    assert _target(None) is None and _target("") is None
    assert _target("stream_chunk:3") == ("stream_chunk", 3)
    for wrong in ("parquet", "parquet:0", "nowhere:1", "parquet:x"):
        with pytest.raises(ValueError, match=ENV):
            _target(wrong)

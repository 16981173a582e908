"""`faults:` settings: a deadline must be > 0, every other value >= 0; an error names the key."""

from __future__ import annotations

import pytest

from rldag.config.errors import SpecError
from rldag.config.spec import load_pipeline
from tests.support.pipelines import scoring_pipeline


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("faults.storage_timeout_s=0", "must be > 0, got 0"),
        ("faults.prefect_request_timeout_s=-1", "must be > 0, got -1"),
        ("faults.node_timeout_s=0", "must be > 0, got 0"),
        ("faults.max_restarts=-1", "must be >= 0, got -1"),
    ],
)
def test_a_bad_fault_setting_names_its_key(write_yaml, dataset, override, message):
    with pytest.raises(SpecError) as err:
        load_pipeline(write_yaml(scoring_pipeline(dataset)), [override])
    assert err.value.path == override.split("=")[0] and message in str(err.value)


def test_the_deadlines_have_defaults(write_yaml, dataset):
    faults = load_pipeline(write_yaml(scoring_pipeline(dataset))).spec.faults
    deadlines = (faults.storage_timeout_s, faults.prefect_request_timeout_s, faults.node_timeout_s)
    assert deadlines == (20.0, 60.0, 7200.0)

"""A node that holds a run at a known point, so a test can stop it there: the `hold` transform
passes its rows through, except that the first time any run reaches iteration `at` it
writes `marker` and then sleeps `seconds` (a run that is stopped meanwhile must give the call
up: a test that waits the whole sleep has failed). Later runs, such as the resume, pass
straight through (the marker exists)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rldag import NodeKind, OperatorDef, Port


@dataclass
class HoldParams:
    marker: str = ""  # the file written when the hold starts
    at: int = 0  # the iteration held
    seconds: float = 120.0  # how long


def _hold(params: HoldParams):
    marker = Path(params.marker)

    def run(inputs, ctx):
        if ctx.iteration == params.at and not marker.exists():
            marker.write_text(str(ctx.iteration))
            time.sleep(params.seconds)
        return inputs["rows"]

    return run


HOLD = OperatorDef(
    name="hold", kind=NodeKind.transform, factory=_hold, ports=(Port("rows"),), params=HoldParams
)


def hold_node(marker: Path, upstream: str, reader: str, port: str, at: int) -> list[str]:
    """Overrides that put a `hold` node on the environment pool (Ray actors) between
    `upstream` and `reader`'s input `port`, holding at iteration `at` for up to 120 s."""
    return [
        "nodes.hold.kind=transform",
        "nodes.hold.op=tests.support.stop_points:HOLD",
        "nodes.hold.pool=environment",
        f"nodes.hold.inputs.rows={upstream}",
        f"nodes.hold.params.marker={marker}",
        f"nodes.hold.params.at={at}",
        f"nodes.{reader}.inputs.{port}=hold",
    ]

"""The reward curve of a run: a PNG of the reward per iteration (matplotlib, Agg, no display
needed), stored with the run as `<run_id>/reward_curve.png`, and Markdown that embeds it.

Composition roots pass `store_reward_curve` to rldag.engine.driver.drive as an `on_close`
hook; the flows publish the stored PNG as a Prefect artifact.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from rldag.engine.run import Run

REWARD_CURVE = "reward_curve.png"  # stored as <run_id>/reward_curve.png


def reward_curve_png(metrics: Sequence[Mapping[str, float]], title: str) -> bytes:
    """A PNG of `reward/mean` (± `reward/std`) over iterations, from metrics rows."""
    rows = [m for m in metrics if not math.isnan(m.get("reward/mean", math.nan))]
    xs = [int(m["iteration"]) for m in rows]
    mean = [m["reward/mean"] for m in rows]
    std = [m.get("reward/std", 0.0) for m in rows]
    fig = Figure(figsize=(7, 3.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(xs, mean, marker="o", markersize=3, linewidth=1.5, label="reward/mean")
    ax.fill_between(
        xs, [m - s for m, s in zip(mean, std, strict=True)],
        [m + s for m, s in zip(mean, std, strict=True)], alpha=0.2, label="± reward/std",
    )  # fmt: skip
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if rows:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    """Markdown showing `png` inline as a data: URI (the Prefect UI renders it as is)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def store_reward_curve(run: Run) -> bytes | None:
    """The reward curve PNG of the iterations done, stored with the run."""
    if not run.metrics:
        return None
    png = reward_curve_png(run.metrics, f"{run.loaded.spec.name} · {run.run_id}")
    run.storage.write_bytes(f"{run.run_id}/{REWARD_CURVE}", png)
    return png

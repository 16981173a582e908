"""The run report: a reward-curve PNG from metrics rows, Markdown that embeds it, and sample
rollouts (prompt, response, reward) picked from the scored table."""

from __future__ import annotations

import base64
import io

import pyarrow as pa
from PIL import Image

from rldag.report.reward_curve import markdown_image, reward_curve_png
from rldag.report.rollouts import rollouts_markdown, sample_rollouts


class _Graph:
    order = ["prompts", "generate", "score"]


def test_the_reward_curve_is_a_png_of_the_reward_per_iteration():
    metrics = [{"iteration": i, "reward/mean": i / 10, "reward/std": 0.1} for i in range(5)]
    png = reward_curve_png(metrics, "grpo · run-1")
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == (700, 350)
    assert len(image.convert("L").getcolors(maxcolors=65536)) > 10  # something is drawn


def test_a_reward_curve_without_rewards_still_renders():
    assert reward_curve_png([{"iteration": 0}], "empty")[:4] == b"\x89PNG"


def test_markdown_embeds_the_png_as_a_data_uri():
    text = markdown_image(b"\x89PNG-bytes", "reward curve")
    assert text.startswith("![reward curve](data:image/png;base64,")
    assert base64.b64decode(text.split(",", 1)[1].rstrip(")")) == b"\x89PNG-bytes"


def test_sample_rollouts_come_evenly_from_the_first_scored_table():
    scored = pa.table(
        {
            "prompt_id": list(range(8)),
            "prompt": [f"{i}+1=" for i in range(8)],
            "response": [str(i + 1) for i in range(8)],
            "reward": [1.0] * 8,
            "advantage": [0.0] * 8,
        }
    )
    prompts = scored.select(["prompt_id", "prompt"])
    rows = sample_rollouts(_Graph(), {"prompts": prompts, "score": scored}, k=4)
    assert [r["prompt_id"] for r in rows] == [0, 2, 4, 6]
    assert set(rows[0]) == {"prompt_id", "prompt", "response", "reward"}


def test_no_scored_table_means_no_rollouts():
    assert sample_rollouts(_Graph(), {"prompts": pa.table({"prompt": ["a"]})}) == []
    assert "No table" in rollouts_markdown([], 3)


def test_rollouts_markdown_shows_prompt_response_and_reward():
    rows = [
        {
            "prompt_id": 7,
            "sample_idx": 1,
            "prompt": [{"role": "user", "content": "2+2="}],
            "response": "```python\nprint(4)\n```",
            "reward": 0.5,
            "ground_truth": "4",
        }
    ]
    text = rollouts_markdown(rows, iteration=3)
    assert text.startswith("# Sample rollouts, iteration 3")
    assert "### prompt 7, sample 1 · reward **0.5** · ground truth `4`" in text
    assert "```\nuser: 2+2=\n```" in text
    assert "~~~\n```python\nprint(4)\n```\n~~~" in text  # a fenced response stays intact

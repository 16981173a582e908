"""Command line: ``python -m examples.tiny_task [--task addition|code|guess|long_cot|lookup]
--out DIR [--rebuild]``.

Installs the shipped build of the tiny task (single-digit addition by default, the code task,
an agent task: the guessing game, tool lookups; or the long chain-of-thought task) into
``DIR``, checked by its checksums, or with ``--rebuild`` trains it here from the recipe; prints
where it is and how the warmed-up policy does at the start.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from examples.tiny_task.build import (
    REBUILD_HELP,
    TASKS,
    build_and_say,
    build_tiny_task,
    cache_key,
    read_stamp,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the process exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.tiny_task",
        description="Build the tiny model, tokenizer and parquet task data into DIR.",
    )
    parser.add_argument(
        "--task",
        choices=sorted(TASKS),
        default="addition",
        help="single-digit addition (default), code, agent or long chain-of-thought tasks",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    parser.add_argument("--rebuild", action="store_true", help=REBUILD_HELP)
    args = parser.parse_args(argv)
    params = TASKS[args.task]()
    out, said = build_and_say(
        args.out.absolute(),
        cache_key(params),
        lambda: build_tiny_task(args.out, force=args.rebuild, params=params),
        args.rebuild,
    )
    warmup = (read_stamp(out) or {}).get("warmup", {})
    print(said)
    if warmup and "length_p99" in warmup:
        print(
            f"  warmed-up policy: exact rate {warmup['exact_rate']:.3f} (sizes up to 4: "
            f"{warmup['short_exact_rate']:.3f}), format rate {warmup['format_rate']:.3f}, "
            f"response length median {warmup['length_median']:.0f} / p99 "
            f"{warmup['length_p99']:.0f} / max {warmup['length_max']} tokens (temperature 1.0)"
        )
    elif warmup and "syntax_rate" in warmup:
        print(
            f"  warmed-up policy: format rate {warmup['format_rate']:.3f}, "
            f"syntax rate {warmup['syntax_rate']:.3f}, exact rate {warmup['exact_rate']:.3f} "
            "(temperature 1.0)"
        )
        for sample in warmup.get("samples", [])[:1]:
            print(f"  sample for {sample['prompt']!r}: {sample['response']!r}")
    elif warmup and "accuracy" not in warmup:  # the agent tasks' first-turn rates
        rates = ", ".join(f"{k} {v:.3f}" for k, v in warmup.items() if not k.endswith("loss"))
        print(f"  warmed-up policy: {rates} (temperature 1.0)")
    elif warmup:
        print(
            f"  warmed-up policy: sampled accuracy {warmup['accuracy']:.3f}, "
            f"format rate {warmup['format_rate']:.3f} (temperature 1.0)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

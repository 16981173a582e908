"""What a request to an rldag rollout server costs over the same request to the engine in
process: the HTTP round trip, JSON and the server's event loop, on a small request (one
prompt, `--tokens` new tokens) where they are most of the time.

    .venv/bin/python bench/rollout_server_latency.py [--requests 50] [--tokens 2]

Runs one server (`python -m operators.rollout.server`, one thread) on the tiny default model
and, in this process, a `TorchEngine` on the same model with one thread; alternates the
two per request. Last line (X a number): ``server request over in-process: X``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import torch
from machine import describe, load_line

from operators.rollout import SamplingParams, TorchEngine
from operators.rollout.guard import auth_headers
from operators.rollout.launch import start_local_servers

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / ".cache" / "tiny" / "model"  # `make model`
TOKEN = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=2)
    args = parser.parse_args()
    print(describe())
    print(load_line("start"), flush=True)
    torch.set_num_threads(1)
    engine = TorchEngine.from_pretrained(str(MODEL))
    prompt = [1, 2, 3]
    params = SamplingParams(max_new_tokens=args.tokens, temperature=1.0, ignore_eos=True)
    body = {
        "input_ids": [prompt],
        "sampling_params": {"max_new_tokens": args.tokens, "temperature": 1.0, "ignore_eos": True},
    }
    local: list[float] = []
    remote: list[float] = []
    server = start_local_servers(str(MODEL), 1, token=TOKEN, weights_root=tempfile.mkdtemp())[0]
    try:
        with httpx.Client(headers=auth_headers(TOKEN)) as client:
            for i in range(args.requests + 1):  # the first of each side warms up
                start = time.perf_counter()
                engine.generate([prompt], params)
                if i:
                    local.append(time.perf_counter() - start)
                start = time.perf_counter()
                client.post(f"{server.url}/generate", json=body).raise_for_status()
                if i:
                    remote.append(time.perf_counter() - start)
    finally:
        server.stop()
    ours, theirs = statistics.median(remote), statistics.median(local)
    print(f"in process: {theirs * 1e3:.2f} ms per request (median of {args.requests})")
    print(f"server:     {ours * 1e3:.2f} ms per request (median of {args.requests})")
    print(load_line("end"))
    print(f"server request over in-process: {ours / theirs:.2f}")


if __name__ == "__main__":
    main()

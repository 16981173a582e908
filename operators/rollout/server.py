"""An HTTP rollout server speaking the subset of SGLang's native API that rldag uses.

Endpoints and shapes follow SGLang's ``http_server.py`` / ``io_struct.py``:

* ``POST /generate``: ``text`` or ``input_ids`` (one prompt or a batch), ``sampling_params``
  (``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``, ``stop``, ``stop_token_ids``,
  ``ignore_eos``, ``n``, ``sampling_seed``), ``return_logprob``, ``rid``. Answers
  ``{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
  "completion_tokens", "cached_tokens", "weight_version", "e2e_latency",
  "output_token_logprobs": [[logprob, token_id, null], ...]}}``, or a list of those (prompt-major,
  then sample) for a batch or ``n > 1``. ``finish_reason`` is ``{"type": "stop", "matched": id or
  string}``, ``{"type": "length", "length": n}`` or ``{"type": "abort", "message": ...}``.
  Streaming is not supported (400).
* ``POST /update_weights_from_disk``: ``{"model_path", "weight_version"?, "abort_all_requests"?}``
  -> ``{"success", "message", "num_paused_requests"}`` (400 when it fails).
* ``GET|POST /flush_cache``, ``GET /health``, ``GET /health_generate``, ``GET /get_model_info``,
  ``GET /get_weight_version``, ``POST /pause_generation`` (``{"mode"}``),
  ``POST /continue_generation``.

Run one: ``python -m operators.rollout.server --model-path DIR --port 0 --port-file F``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from operators.rollout.engine_loop import EngineLoop, GenerateItem
from operators.rollout.rng import random_seed
from operators.rollout.sampling import Completion, SamplingParams

__all__ = ["build_app", "finish_reason_json", "main", "parse_sampling_params"]

_TOP_K_ALL = 1 << 30  # SGLang's "whole vocabulary"


def _error(message: str, status: int = 400) -> JSONResponse:
    body = {"object": "error", "message": message, "type": "BadRequest", "code": status}
    return JSONResponse(body, status_code=status)


def parse_sampling_params(raw: dict[str, Any] | None) -> SamplingParams:
    """SGLang ``sampling_params`` -> ours (SGLang's defaults: 128 new tokens, temperature 1)."""
    raw = dict(raw or {})
    top_k = raw.get("top_k")
    top_k = -1 if top_k is None or top_k < 0 or top_k >= _TOP_K_ALL else int(top_k)
    if raw.get("min_new_tokens"):
        raise ValueError("min_new_tokens is not supported by the rldag rollout server")
    stop = raw.get("stop") or ()
    return SamplingParams(
        n=int(raw.get("n") or 1),
        temperature=float(1.0 if raw.get("temperature") is None else raw["temperature"]),
        top_p=float(1.0 if raw.get("top_p") is None else raw["top_p"]),
        top_k=top_k,
        max_new_tokens=int(raw.get("max_new_tokens") or 128),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        stop_token_ids=tuple(raw.get("stop_token_ids") or ()),
        seed=raw.get("sampling_seed"),
        ignore_eos=bool(raw.get("ignore_eos", False)),
    )


def finish_reason_json(c: Completion) -> dict[str, Any]:
    """SGLang's finish-reason object for a completion."""
    if c.finish_reason == "stop":
        return {"type": "stop", "matched": c.matched}
    if c.finish_reason == "length":
        return {"type": "length", "length": len(c.token_ids)}
    return {"type": "abort", "message": "Abort before or during generation."}


def _output(
    c: Completion, rid: str, prompt_len: int, version: str, start: float, logprobs: bool
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": finish_reason_json(c),
        "prompt_tokens": prompt_len,
        "weight_version": version,
        "completion_tokens": len(c.token_ids),
        "cached_tokens": 0,
        "e2e_latency": time.time() - start,
    }
    if logprobs:
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [
            [lp, tok, None] for lp, tok in zip(c.logprobs, c.token_ids, strict=True)
        ]
    return {"text": c.text or "", "output_ids": c.token_ids, "meta_info": meta}


def build_app(loop: EngineLoop, model_path: str) -> FastAPI:
    """The FastAPI app serving ``loop`` (whose engine came from ``model_path``)."""
    app = FastAPI(title="rldag rollout server")
    tokenizer = loop.engine.tokenizer
    loop.model_path = model_path

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request):
        start = time.time()
        body = await request.json()
        if body.get("stream"):
            return _error("stream=true is not supported by the rldag rollout server")
        if (body.get("text") is None) == (body.get("input_ids") is None):
            return _error("give exactly one of text or input_ids")
        try:
            params = parse_sampling_params(body.get("sampling_params"))
        except (TypeError, ValueError) as err:
            return _error(str(err))
        if body.get("text") is not None:
            if tokenizer is None:
                return _error("text input needs a tokenizer; send input_ids")
            texts = body["text"]
            single = isinstance(texts, str)
            prompts = [tokenizer(t)["input_ids"] for t in ([texts] if single else texts)]
        else:
            ids = body["input_ids"]
            single = bool(ids) and isinstance(ids[0], int)
            prompts = [list(map(int, ids))] if single else [list(map(int, p)) for p in ids]
        if not prompts or any(not p for p in prompts):
            return _error("every prompt needs at least one token")
        if params.stop and tokenizer is None:
            return _error("stop strings need a tokenizer")
        seed = random_seed() if params.seed is None else int(params.seed)
        items = [GenerateItem(p, params, seed, i) for i, p in enumerate(prompts)]
        groups, version = await asyncio.wrap_future(loop.generate(items))
        rid = body.get("rid")
        rids = rid if isinstance(rid, list) else None
        outs = []
        for i, (prompt, group) in enumerate(zip(prompts, groups, strict=True)):
            for j, c in enumerate(group):
                base = rids[i] if rids else (rid or uuid.uuid4().hex)
                name = base if len(group) == 1 else f"{base}-{j}"
                outs.append(
                    _output(c, name, len(prompt), version, start, bool(body.get("return_logprob")))
                )
        return outs[0] if single and params.n == 1 else outs

    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/get_model_info")
    async def model_info() -> dict[str, Any]:
        return {
            "model_path": loop.model_path,
            "tokenizer_path": model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": loop.weight_version,
        }

    @app.get("/get_weight_version")
    async def weight_version() -> dict[str, Any]:
        return {"weight_version": loop.weight_version}

    @app.post("/update_weights_from_disk")
    async def update_weights(request: Request):
        body = await request.json()
        path = body.get("model_path")
        if not path or not Path(path).is_dir():
            content = {"success": False, "message": f"no model directory at {path!r}"}
            return JSONResponse(content | {"num_paused_requests": 0}, status_code=400)
        version = body.get("weight_version")
        future = loop.update_weights(path, version, bool(body.get("abort_all_requests")))
        try:
            ok, message, aborted = await asyncio.wrap_future(future)
        except Exception as err:
            content = {"success": False, "message": f"failed to load {path}: {err}"}
            return JSONResponse(content | {"num_paused_requests": 0}, status_code=400)
        if version is not None:
            message += f" Weight version updated to {version}."
        return {"success": ok, "message": message, "num_paused_requests": aborted}

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        # Prefix caches live only as long as their group; there is no cross-request cache.
        text = "Cache flushed.\nPlease check backend logs for more details. (When there are "
        text += "running or waiting requests, the operation will not be performed.)\n"
        return Response(content=text, status_code=200)

    @app.post("/pause_generation")
    async def pause(request: Request):
        raw = await request.body()
        mode = (await request.json()).get("mode", "abort") if raw else "abort"
        if mode not in ("abort", "retract", "in_place"):
            return _error(f"Invalid mode: {mode!r}. Expected one of abort, retract, in_place.")
        await asyncio.wrap_future(loop.pause(mode))
        return {"message": "Generation paused successfully.", "status": "ok"}

    @app.post("/continue_generation")
    async def resume():
        await asyncio.wrap_future(loop.resume())
        return {"message": "Generation continued successfully.", "status": "ok"}

    return app


def _exit_with_parent(pid: int) -> None:
    """Exit this process (from a daemon thread) once process ``pid`` no longer exists, so a
    crashed owner leaves no orphaned server behind."""
    import os
    import threading

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    """Start a server; with ``--port 0`` the OS picks a free port (written to ``--port-file``)."""
    parser = argparse.ArgumentParser(description="rldag rollout server (SGLang protocol subset)")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", default=None, help="write the bound port here when ready")
    parser.add_argument("--max-batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--weight-version", default="0")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when this pid is gone")
    args = parser.parse_args(argv)
    if args.parent_pid:
        _exit_with_parent(args.parent_pid)

    import torch
    import uvicorn

    from operators.rollout.torch_engine import TorchEngine

    torch.set_num_threads(args.threads)
    engine = TorchEngine.from_pretrained(
        args.model_path, device=args.device, max_batch_size=args.max_batch_size
    )
    loop = EngineLoop(engine, weight_version=args.weight_version)
    app = build_app(loop, args.model_path)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(str(sock.getsockname()[1]))
        tmp.rename(args.port_file)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        loop.close()


if __name__ == "__main__":
    main()

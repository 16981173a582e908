"""Client for N rollout servers (ours or SGLang): load balancing and failover.

Each prompt group (one prompt, ``n`` samples) is one ``/generate`` request, so a group always
stays on one server (its prefix is prefilled once there). A request goes to the live server
with the fewest outstanding requests. When a server fails mid-request (connection refused or
reset, no response, a 5xx), the client checks its ``/health``; a server that does not answer is
marked dead and never picked again, and the group is re-sent to another server. Every request
carries the run's bearer token (``token``). Every group is
tried at most ``max_attempts`` times; when no live server is left the call raises.

The turns of one multi-turn session (``turn``: an agent's episode) stick to the server that
served its first turn, whose cache holds the conversation so far: SGLang's radix cache finds
the shared prefix by itself; rldag's servers keep the session's cache (``session_params``,
with ``session_caches``) until ``close_session``. Either way turn t prefills only what turn t-1
and the environment added. A session whose server died continues on another (prefilled whole).

A weight update either lets the requests in flight finish first, aborts them, retracts them or
keeps them (``InFlight``): the servers pause with SGLang's ``retract`` (caches recomputed) or
``in_place`` (caches kept) mode, load the new weights and continue, so every interrupted
response is finished by the new weights; each completion then carries the versions that
generated it (``Completion.versions``, from ``meta_info``).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from operators.rollout.guard import auth_headers
from operators.rollout.sampling import Completion, SamplingParams
from operators.rollout.weight_update import InFlight, PauseMode

__all__ = ["NoServerError", "RolloutClient", "completion_from_sglang", "sampling_params_json"]

log = logging.getLogger("rldag.rollout")
HEALTH_TIMEOUT_S = 2.0  # a suspect server's /health must answer within this


def _what_failed(err: Exception, timeout_s: float) -> str:
    """How a request to a server failed, for a user: a timeout says its bound."""
    if isinstance(err, httpx.TimeoutException):
        return f"stopped answering ({type(err).__name__} after {timeout_s:g} s)"
    return f"failed ({err!r})"


class NoServerError(RuntimeError):
    """No live rollout server is left (or a group failed on every attempt)."""


@dataclass
class _Server:
    url: str
    outstanding: int = 0
    alive: bool = True
    failures: int = 0
    down: str = ""  # why it was marked dead


def sampling_params_json(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """Our sampling params as SGLang ``sampling_params``."""
    out: dict[str, Any] = {
        "n": params.n,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "max_new_tokens": params.max_new_tokens,
        "ignore_eos": params.ignore_eos,
    }
    if params.stop:
        out["stop"] = list(params.stop)
    if params.stop_token_ids:
        out["stop_token_ids"] = list(params.stop_token_ids)
    if seed is not None:
        out["sampling_seed"] = seed
    return out


def completion_from_sglang(out: dict[str, Any]) -> Completion:
    """One SGLang ``/generate`` output dict -> Completion (needs ``return_logprob``)."""
    meta = out["meta_info"]
    triples = meta.get("output_token_logprobs") or []
    ids = out.get("output_ids") or [int(t[1]) for t in triples]
    reason = meta.get("finish_reason") or {"type": "length"}
    kind = reason.get("type", "length")
    matched = reason.get("matched") if kind == "stop" else None
    return Completion(
        token_ids=[int(t) for t in ids],
        logprobs=[float(t[0]) for t in triples],
        finish_reason=kind if kind in ("stop", "length") else "abort",
        text=out.get("text"),
        matched=matched,
        versions=tuple((int(i), str(v)) for i, v in meta.get("weight_version_starts") or ()),
        cached_tokens=int(meta.get("cached_tokens") or 0),
    )


def _oldest_version(meta: dict[str, Any]) -> int:
    """The oldest policy version an output's ``meta_info`` reports (SGLang's: its only one)."""
    return int(meta.get("oldest_weight_version", meta.get("weight_version")) or 0)


class RolloutClient:
    """Sends prompt groups to a set of rollout servers; see the module docstring."""

    def __init__(
        self,
        urls: list[str],
        *,
        timeout_s: float = 600.0,
        max_inflight: int = 64,
        max_attempts: int | None = None,
        token: str = "",
        session_caches: bool = False,
    ) -> None:
        if not urls:
            raise ValueError("RolloutClient needs at least one server URL")
        self.servers = [_Server(url.rstrip("/")) for url in urls]
        self.timeout_s = timeout_s
        self.max_inflight = max_inflight
        self.max_attempts = max_attempts or 2 * len(urls)
        self.session_caches = session_caches  # the servers keep caches per session_params
        self._sessions: dict[str, _Server] = {}  # a session's server (its cache is there)
        self._lock = threading.Lock()
        limits = httpx.Limits(max_connections=max_inflight, max_keepalive_connections=max_inflight)
        headers = auth_headers(token) if token else {}
        self._http = httpx.Client(timeout=timeout_s, limits=limits, headers=headers)

    @property
    def alive(self) -> list[str]:
        """URLs of servers not marked dead."""
        return [s.url for s in self.servers if s.alive]

    def outstanding(self) -> dict[str, int]:
        """Requests in flight per server URL."""
        with self._lock:
            return {s.url: s.outstanding for s in self.servers}

    def close(self) -> None:
        self._http.close()

    # ---- generation --------------------------------------------------------------------------

    def generate(
        self, prompt_ids: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[tuple[list[Completion], int]]:
        """``params.n`` completions per prompt and the oldest policy version that produced them.

        ``seeds[i]`` (optional) is the ``sampling_seed`` of prompt ``i``'s group, which makes the
        group's samples the same on whichever server runs it.
        """
        seeds = seeds or [None] * len(prompt_ids)
        workers = max(1, min(len(prompt_ids), self.max_inflight))
        with ThreadPoolExecutor(workers, thread_name_prefix="rollout-client") as pool:
            futures = [
                pool.submit(self._run_group, prompt, params, seed)
                for prompt, seed in zip(prompt_ids, seeds, strict=True)
            ]
            return [f.result() for f in futures]

    def turn(
        self, prompt: list[int], params: SamplingParams, seed: int | None, session: str
    ) -> tuple[list[Completion], int]:
        """One turn of ``session`` (one prompt), on the server of its earlier turns."""
        return self._run_group(prompt, params, seed, session)

    def close_session(self, session: str) -> None:
        """``session`` has no more turns: its server drops the cache it kept (best effort)."""
        with self._lock:
            server = self._sessions.pop(session, None)
        if server is None or not self.session_caches or not server.alive:
            return
        try:
            self._http.post(f"{server.url}/close_session", json={"session_id": session})
        except httpx.HTTPError as err:  # the server's bound on kept tokens evicts it anyway
            log.info("closing session %s on %s: %r", session, server.url, err)

    def _pick(self, session: str | None = None) -> _Server:
        with self._lock:
            live = [s for s in self.servers if s.alive]
            if not live:
                raise NoServerError(self._none_left())
            server = self._sessions.get(session) if session is not None else None
            if server is None or not server.alive:
                server = min(live, key=lambda s: s.outstanding)
                if session is not None:
                    self._sessions[session] = server
            server.outstanding += 1
            return server

    def _run_group(
        self,
        prompt: list[int],
        params: SamplingParams,
        seed: int | None,
        session: str | None = None,
    ) -> tuple[list[Completion], int]:
        payload: dict[str, Any] = {
            "input_ids": prompt,
            "sampling_params": sampling_params_json(params, seed),
            "return_logprob": True,
        }
        if session is not None and self.session_caches:
            payload["session_params"] = {"id": session}
        last_error: Exception | None = None
        for _ in range(self.max_attempts):
            server = self._pick(session)
            try:
                response = self._http.post(f"{server.url}/generate", json=payload)
                if response.status_code >= 500:
                    raise httpx.HTTPStatusError(
                        f"{response.status_code}", request=response.request, response=response
                    )
                if response.status_code != 200:
                    raise ValueError(f"{server.url}/generate: {response.text}")
                body = response.json()
            except (httpx.TransportError, httpx.HTTPStatusError) as err:
                last_error = err
                self._suspect(server, err)
                continue
            finally:
                with self._lock:
                    server.outstanding -= 1
            outs = body if isinstance(body, list) else [body]
            completions = [completion_from_sglang(o) for o in outs]
            return completions, min(_oldest_version(o["meta_info"]) for o in outs)
        raise NoServerError(f"a prompt group failed {self.max_attempts} times: {last_error!r}")

    def _none_left(self) -> str:
        """Why no server is left: each one and what it did."""
        dead = "; ".join(f"{s.url} {s.down}" for s in self.servers if s.down)
        return f"no live rollout server left ({dead})" if dead else "no live rollout server left"

    def _suspect(self, server: _Server, err: Exception) -> None:
        """After a failed request: mark ``server`` dead unless ``/health`` still answers
        within HEALTH_TIMEOUT_S."""
        try:
            answer = self._http.get(f"{server.url}/health", timeout=HEALTH_TIMEOUT_S)
            healthy = answer.status_code == 200
        except httpx.HTTPError:
            healthy = False
        with self._lock:
            server.failures += 1
            if not healthy and server.alive:
                server.alive = False
                server.down = _what_failed(err, self.timeout_s)
                log.warning("rollout server %s is down (%r); re-sending its work", server.url, err)

    # ---- control -----------------------------------------------------------------------------

    def _post_all(self, path: str, body: dict[str, Any] | None = None) -> list[httpx.Response]:
        """POST to every live server; a server that fails at the transport level is checked
        (and marked dead) as in generation. Raises when no server answered."""
        servers = [s for s in self.servers if s.alive]
        if not servers:
            raise NoServerError(self._none_left())
        with ThreadPoolExecutor(len(servers)) as pool:
            futures = [pool.submit(self._http.post, f"{s.url}{path}", json=body) for s in servers]
        answers = []
        for server, future in zip(servers, futures, strict=True):
            try:
                answers.append(future.result())
            except httpx.TransportError as err:
                self._suspect(server, err)
        if not answers:
            raise NoServerError(f"no rollout server answered {path}")
        return answers

    def update_weights_from_disk(
        self, model_path: str, version: int, in_flight: InFlight = InFlight.finish
    ) -> None:
        """Every live server loads ``model_path`` and reports ``version`` from then on;
        ``in_flight`` says what happens to the requests they are generating (module docstring).
        """
        body: dict[str, Any] = {"model_path": model_path, "weight_version": str(version)}
        if in_flight is InFlight.abort:
            body["abort_all_requests"] = True
        if in_flight not in (InFlight.retract, InFlight.keep):
            self._update_all(body)
            return
        # SGLang's pause modes: retract recomputes the caches on continue, in_place keeps them
        self.pause(PauseMode.retract if in_flight is InFlight.retract else PauseMode.in_place)
        try:
            self._update_all(body)
        finally:
            self.resume()

    def _update_all(self, body: dict[str, Any]) -> None:
        for response in self._post_all("/update_weights_from_disk", body):
            content = response.json()
            if response.status_code != 200 or not content.get("success"):
                raise RuntimeError(f"weight update failed: {content.get('message', content)}")

    def flush_cache(self) -> None:
        self._post_all("/flush_cache")

    def pause(self, mode: PauseMode = PauseMode.abort) -> None:
        self._post_all("/pause_generation", {"mode": PauseMode(mode).value})

    def resume(self) -> None:
        self._post_all("/continue_generation")

"""The fast decoder: forward passes of Llama-style decoders (Llama, Qwen2, Qwen3, Mistral:
RMSNorm, rotary attention with grouped KV heads, gated MLP) run directly on the Hugging Face
model's own modules, so the weights are the model's (``load_state_dict`` on the model is seen at
once). It skips HF's per-call mask building and cache bookkeeping, which dominate small-batch
CPU decoding. Its per-step op count is kept small: q/k/v and gate/up projections run as one
matmul each (the model's parameters are re-pointed to views of one fused tensor, so nothing is
duplicated and ``load_state_dict`` still lands in them), norms use ``F.rms_norm``, RoPE is
applied to q and k together. Matmuls of many rows go through oneDNN's fp32 kernel
(``operators.model.cpu_linear``): ~2x MKL's where MKL takes its generic path (AMD EPYC here).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from operators.model.cpu_linear import linear
from operators.rollout.decoding import Prefill, right_padded
from operators.rollout.kv_cache import SlotKVCache

__all__ = ["LLAMA_FAMILY", "LlamaFamilyDecoder", "supports_fast_path"]

LLAMA_FAMILY = ("llama", "qwen2", "qwen3", "mistral")
# Decode attention is elementwise up to this many (position, row, head, dim) products.
ELEMENTWISE_LIMIT = 1 << 22


def _fuse(modules: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the weights (and biases) of ``modules`` along the output dim and re-point
    each module's parameters to its rows of the fused tensor (so the two stay one storage)."""
    weight = torch.cat([m.weight.detach() for m in modules])
    has_bias = [m.bias is not None for m in modules]
    bias = torch.cat([m.bias.detach() for m in modules]) if all(has_bias) else None
    if any(has_bias) and bias is None:
        raise ValueError("cannot fuse projections where only some have a bias")
    start = 0
    for m in modules:
        rows = m.weight.shape[0]
        m.weight.data = weight[start : start + rows]
        if bias is not None:
            m.bias.data = bias[start : start + rows]
        start += rows
    return weight, bias


class _Layer:
    """The tensors one decoder layer needs, fused where possible."""

    def __init__(self, layer: torch.nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv_w, self.qkv_b = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        self.gate_up_w, _ = _fuse([mlp.gate_proj, mlp.up_proj])
        self.o_proj, self.down_proj, self.act = attn.o_proj, mlp.down_proj, mlp.act_fn
        self.in_norm, self.post_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.q_norm = getattr(attn, "q_norm", None)
        self.k_norm = getattr(attn, "k_norm", None)


def _rms(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)


def supports_fast_path(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a Llama-family decoder this module runs (no sliding window)."""
    config = model.config
    if getattr(config, "model_type", None) not in LLAMA_FAMILY:
        return False
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return False
    base = getattr(model, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if base is None or not all(hasattr(base, name) for name in needed):
        return False
    attn = base.layers[0].self_attn
    return all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj"))


class LlamaFamilyDecoder:
    """Prefill and decode for Llama-style models using the model's own weights."""

    def __init__(self, model: torch.nn.Module) -> None:
        config = model.config
        self.model = model
        self.base = model.model
        self.layers = len(self.base.layers)
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.groups = self.heads // self.kv_heads
        self.scaling = getattr(self.base.layers[0].self_attn, "scaling", self.head_dim**-0.5)
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device
        self._layers = [_Layer(layer) for layer in self.base.layers]
        self._cos = self._sin = torch.empty(0)
        kinds = [self.scaling] * self.heads + [1.0] * self.kv_heads + [0.0] * self.kv_heads
        self._head_scale = torch.tensor(kinds, dtype=self.dtype, device=self.device).unsqueeze(-1)
        shift = [0.0] * (self.heads + self.kv_heads) + [1.0] * self.kv_heads
        self._head_shift = torch.tensor(shift, dtype=self.dtype, device=self.device).unsqueeze(-1)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head cos and sin for ``positions``: ``(len(positions), all heads, head_dim)``.

        One ``x * cos + x.roll(half) * sin`` over the fused q/k/v heads then does everything:
        q heads get RoPE times the attention scaling, k heads RoPE, v heads pass through (cos 1,
        sin 0). ``sin`` is negated on its first half so the roll stands for ``rotate_half``.
        """
        need = int(positions.max()) + 1 if positions.numel() else 1
        if self._cos.shape[0] < need:
            size = max(need, 2 * self._cos.shape[0], 64)
            grid = torch.arange(size, device=self.device).unsqueeze(0)
            probe = torch.empty(1, dtype=self.dtype, device=self.device)
            cos, sin = self.base.rotary_emb(probe, grid)
            sin = sin[0].clone()
            sin[:, : self.head_dim // 2] *= -1
            self._cos, self._sin = cos[0], sin
        cos = self._cos[positions].unsqueeze(-2) * self._head_scale + self._head_shift
        return cos, self._sin[positions].unsqueeze(-2) * self._head_scale

    def _qkv(self, layer: _Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Normed input -> (scaled, rotated q ``(..., heads, d)``, rotated k and v
        ``(..., 2 * kv_heads, d)``)."""
        h = _rms(layer.in_norm, x)
        qkv = linear(h, layer.qkv_w, layer.qkv_b)
        qkv = qkv.view(*x.shape[:-1], self.heads + 2 * self.kv_heads, self.head_dim)
        if layer.q_norm is not None:
            q, k = qkv[..., : self.heads, :], qkv[..., self.heads : self.heads + self.kv_heads, :]
            v = qkv[..., self.heads + self.kv_heads :, :]
            qkv = torch.cat([_rms(layer.q_norm, q), _rms(layer.k_norm, k), v], dim=-2)
        qkv = qkv * cos + qkv.roll(self.head_dim // 2, dims=-1) * sin
        return qkv[..., : self.heads, :], qkv[..., self.heads :, :]

    def _mlp(self, layer: _Layer, x: torch.Tensor) -> torch.Tensor:
        gate, up = linear(_rms(layer.post_norm, x), layer.gate_up_w, None).chunk(2, dim=-1)
        down = layer.down_proj
        return x + linear(layer.act(gate) * up, down.weight, down.bias)

    def _o_proj(self, layer: _Layer, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return x + linear(out, layer.o_proj.weight, layer.o_proj.bias)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        head = self.model.lm_head
        h = _rms(self.base.norm, hidden)
        if isinstance(head, torch.nn.Linear):
            return linear(h, head.weight, head.bias).float()
        return head(h).float()

    def prefill(self, prompts: list[list[int]]) -> Prefill:
        """One causal forward over right-padded prompts; the padding is never attended to.

        The last layer runs its output projection and MLP only at each prompt's last token:
        nothing else reads its other positions (their keys and values come before them).
        """
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        ids = right_padded(prompts, self.device)
        cos, sin = self._rope(torch.arange(width, device=self.device))
        x = self.base.embed_tokens(ids)
        rows = torch.arange(len(prompts), device=self.device)
        last = torch.tensor(lengths, device=self.device) - 1
        kv_layers = []
        shape = (len(prompts), width, 2, self.kv_heads, self.head_dim)
        for index, layer in enumerate(self._layers):
            q, kv = self._qkv(layer, x, cos, sin)
            kv = kv.reshape(shape)
            kv_layers.append(kv)
            k, v, q = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2), q.transpose(1, 2)
            out = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=1.0, enable_gqa=self.groups > 1
            ).transpose(1, 2)
            if index == self.layers - 1:
                x, out = x[rows, last], out[rows, last]
            x = self._mlp(layer, self._o_proj(layer, x, out.reshape(*x.shape[:-1], -1)))
        return Prefill(kv_layers, self._logits(x), lengths)

    def extend(self, pasts: list[list[torch.Tensor]], suffixes: list[list[int]]) -> Prefill:
        """Prefill ``suffixes`` after cached prefixes: row ``i`` continues the positions whose
        per-layer keys/values are ``pasts[i]`` (``(length, 2, kv_heads, head_dim)`` each, as a
        ``Prefill`` row holds them). The returned cache holds each whole sequence (prefix and
        suffix) from position 0; the logits are at each suffix's last token.
        """
        rows, dev = len(suffixes), self.device
        starts = torch.tensor([p[0].shape[0] for p in pasts], device=dev)
        lengths = [int(s) + len(t) for s, t in zip(starts.tolist(), suffixes, strict=True)]
        ids = right_padded(suffixes, dev)
        width = ids.shape[1]
        positions = starts.unsqueeze(1) + torch.arange(width, device=dev)  # (rows, width)
        span = int(positions.max()) + 1  # the padding's writes land past each row's end
        cos, sin = self._rope(positions)
        visible = torch.arange(span, device=dev) <= positions.unsqueeze(-1)  # (rows, width, span)
        row_of = torch.arange(rows, device=dev).unsqueeze(1).expand(rows, width)
        last = torch.tensor([len(t) for t in suffixes], device=dev) - 1
        x = self.base.embed_tokens(ids)
        kv_layers = []
        for index, layer in enumerate(self._layers):
            q, kv = self._qkv(layer, x, cos, sin)
            cache = torch.zeros((rows, span, 2, self.kv_heads, self.head_dim), dtype=self.dtype,
                                device=dev)  # fmt: skip
            for row, past in enumerate(pasts):
                cache[row, : past[index].shape[0]] = past[index]
            cache[row_of, positions] = kv.view(rows, width, 2, self.kv_heads, self.head_dim)
            kv_layers.append(cache)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), cache[:, :, 0].transpose(1, 2), cache[:, :, 1].transpose(1, 2),
                attn_mask=visible.unsqueeze(1), scale=1.0, enable_gqa=self.groups > 1,
            ).transpose(1, 2)  # fmt: skip
            if index == self.layers - 1:
                x, out = x[row_of[:, 0], last], out[row_of[:, 0], last]
            x = self._mlp(layer, self._o_proj(layer, x, out.reshape(*x.shape[:-1], -1)))
        return Prefill(kv_layers, self._logits(x), lengths)

    def decode(
        self,
        cache: SlotKVCache,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        unique: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Feed ``tokens[i]`` at ``positions[i]`` of slot ``i`` (slots ``0..len(tokens)-1``).

        Writes each slot's new key/value at its position, attends over positions ``<=`` it, and
        returns float32 next-token logits ``(len(tokens), vocab)``. With ``unique`` =
        ``(reps, inverse)`` (rows ``reps[inverse]`` hold the same sequences as all rows,
        ``operators.rollout.dedup``) the projections and MLPs run on ``reps`` only.
        """
        rows, span = tokens.shape[0], int(positions.max()) + 1
        reps, inverse = unique if unique is not None else (None, None)
        cos, sin = self._rope(positions if reps is None else positions[reps])
        hidden = torch.arange(span, device=self.device).unsqueeze(-1) > positions  # (span, rows)
        x = self.base.embed_tokens(tokens if reps is None else tokens[reps])
        for index, layer in enumerate(self._layers):
            q, kv = self._qkv(layer, x, cos, sin)
            if inverse is not None:
                q, kv = q[inverse], kv[inverse]
            cache.store(index, positions, kv.view(rows, 2, self.kv_heads, self.head_dim))
            keys, values = cache.span(index, rows, span)
            q = q.reshape(rows, self.kv_heads, self.groups, self.head_dim)
            out = _decode_attention(q, keys, values, hidden).reshape(rows, -1)
            x = self._mlp(layer, self._o_proj(layer, x, out if reps is None else out[reps]))
        logits = self._logits(x)
        return logits if inverse is None else logits[inverse]


def _decode_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, hidden: torch.Tensor
) -> torch.Tensor:
    """One query per row over its cached positions: ``q`` ``(rows, kv_heads, groups, d)``
    (already scaled), ``keys``/``values`` ``(span, rows, kv_heads, d)`` position-major,
    ``hidden`` ``(span, rows)`` true where a position is not attended. Returns
    ``(rows, kv_heads, groups, d)``.

    Short spans are computed elementwise along the position-major cache, streaming it once (on
    CPU this beats a batched matmul of ``rows * heads`` tiny matrices several times); long ones,
    whose elementwise temporaries would be large, go through ``scaled_dot_product_attention``.
    """
    span, rows, kv_heads, dim = keys.shape
    groups = q.shape[2]
    if span * rows * kv_heads * groups * dim <= ELEMENTWISE_LIMIT:
        scores = (keys.unsqueeze(-2) * q).sum(-1, dtype=torch.float32)  # (span, rows, kvh, g)
        scores.masked_fill_(hidden.view(span, rows, 1, 1), float("-inf"))
        scores = (scores - scores.amax(0, keepdim=True)).exp_()
        probs = scores.div_(scores.sum(0, keepdim=True)).to(q.dtype)
        return (probs.unsqueeze(-1) * values.unsqueeze(-2)).sum(0)
    query = q.reshape(rows, kv_heads * groups, 1, dim)
    key, value = keys.permute(1, 2, 0, 3), values.permute(1, 2, 0, 3)
    mask = ~hidden.t().reshape(rows, 1, 1, span)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, scale=1.0, enable_gqa=groups > 1
    )
    return out.view(rows, kv_heads, groups, dim)

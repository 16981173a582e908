"""oneDNN-routed linear layers: the same loss and gradients as ``F.linear`` within fp32
rounding (measured against a float64 copy), the same modules and state dict, and the plain
path wherever oneDNN's kernel does not apply."""

from __future__ import annotations

import copy

import pytest
import torch

from operators.model import cpu_linear
from operators.model.cpu_linear import RoutedLinear, route_linears
from tests.support.tiny_models import VOCAB, random_causal_lm
from tests.support.tolerances import ROUNDING_FACTOR

pytestmark = pytest.mark.skipif(not cpu_linear._ONEDNN, reason="torch built without oneDNN")


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    loss = torch.log_softmax(logits, -1)[..., 1:].mean()
    loss.backward()
    return [loss.detach()] + [p.grad.detach().clone() for p in model.parameters()]


def test_routed_model_matches_plain_within_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4 x 40 batch (160 rows per matmul: every linear takes oneDNN, forward and both
    gradients) gives the plain model's loss and every parameter's gradient within
    ROUNDING_FACTOR times the plain fp32 path's own error against float64."""
    plain = random_causal_lm(0)
    routed = route_linears(copy.deepcopy(plain))
    exact = copy.deepcopy(plain).double()
    ids = torch.randint(0, VOCAB, (4, 40), generator=torch.Generator().manual_seed(0))
    want = _loss_and_grads(plain, ids)
    called = []
    real = cpu_linear._dnn
    monkeypatch.setattr(cpu_linear, "_dnn", lambda *a: called.append(1) or real(*a))
    got = _loss_and_grads(routed, ids)
    assert len(called) >= 3 * 7  # forward, input and weight gradient of each linear
    truth = _loss_and_grads(exact, ids)
    assert sum(isinstance(m, RoutedLinear) for m in routed.modules()) >= 7
    for w, g, t in zip(want, got, truth, strict=True):
        atol = max(ROUNDING_FACTOR * float((w.double() - t).abs().max()), 1e-7)
        torch.testing.assert_close(g, w, atol=atol, rtol=0)
    assert any(float(g.abs().max()) > 1e-4 for g in got[1:])  # gradients that could differ


def test_routing_keeps_modules_and_state_dict() -> None:
    model = random_causal_lm(0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    route_linears(model)
    after = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [id(m) for m in after] == [id(m) for m in linears]
    assert all(type(m) is RoutedLinear for m in after)
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


@pytest.mark.parametrize("case", ["few rows", "float64", "autocast"])
def test_plain_path_where_onednn_does_not_apply(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ONEDNN_MIN_ROWS, for other dtypes and under autocast the layer is ``F.linear``:
    bit-identical outputs, and oneDNN's kernel is never called."""
    called = []
    real = cpu_linear._dnn
    monkeypatch.setattr(cpu_linear, "_dnn", lambda *a: called.append(1) or real(*a))
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(cpu_linear.ONEDNN_MIN_ROWS if case != "few rows" else 3, 16)
    if case == "float64":
        layer, x = layer.double(), x.double()
    want = layer(x)
    route_linears(layer)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=case == "autocast"):
        got, plain = layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert torch.equal(got, plain)
    if case != "autocast":
        assert torch.equal(got, want)
    assert not called

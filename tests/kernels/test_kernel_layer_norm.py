"""ADP005: FusedDropoutAddLayerNorm / dropout_add_layer_norm / dropout_add_layer_norm_module /
dropout_add_layer_norm_residual against nn.Dropout (or F.dropout) + add + nn.LayerNorm."""

from __future__ import annotations

from typing import Sequence, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import adopter_kernels as ak


def _pair(shape: Sequence[int], p: float, dtype: torch.dtype, **ln_kwargs: bool) -> Tuple[nn.Module, nn.Module]:
    """(original Dropout+LayerNorm, fused module with the same parameters)."""
    ln = nn.LayerNorm(shape, dtype=dtype, **ln_kwargs)
    with torch.no_grad():
        for param in ln.parameters():
            param.normal_()
    original = nn.ModuleDict({"drop": nn.Dropout(p), "ln": ln})
    fused = ak.FusedDropoutAddLayerNorm(shape, dtype=dtype, dropout=p, **ln_kwargs)
    fused.load_state_dict(ln.state_dict(), strict=True)
    return original, fused


def _run_original(original: nn.Module, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return original["ln"](original["drop"](x) + r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("normalized,batch", [((16,), (4, 7)), ((7, 16), (4,)), ((5,), (3, 2, 2))])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("training", [True, False])
def test_bit_identical_to_original_under_same_seed(
    normalized: Tuple[int, ...], batch: Tuple[int, ...], p: float, training: bool, dtype: torch.dtype
) -> None:
    original, fused = _pair(normalized, p, dtype)
    original.train(training)
    fused.train(training)
    x = torch.randn(*batch, *normalized, dtype=dtype, requires_grad=True)
    r = torch.randn(*batch, *normalized, dtype=dtype, requires_grad=True)
    x2, r2 = (t.detach().clone().requires_grad_() for t in (x, r))
    g = torch.randn(*batch, *normalized, dtype=dtype)

    torch.manual_seed(123)
    y = fused(x, r)
    y.backward(g)
    torch.manual_seed(123)
    y_ref = _run_original(original, x2, r2)
    y_ref.backward(g)

    assert torch.equal(y, y_ref)
    assert torch.equal(x.grad, x2.grad) and torch.equal(r.grad, r2.grad)
    assert torch.equal(fused.weight.grad, original["ln"].weight.grad)
    assert torch.equal(fused.bias.grad, original["ln"].bias.grad)


@pytest.mark.parametrize("ln_kwargs", [{}, {"bias": False}, {"elementwise_affine": False}])
def test_state_dict_keys_and_shapes_are_layer_norms(ln_kwargs: dict) -> None:
    original, fused = _pair((6,), 0.1, torch.float32, **ln_kwargs)
    ref_sd, sd = original["ln"].state_dict(), fused.state_dict()
    assert list(sd) == list(ref_sd)
    assert all(sd[k].shape == ref_sd[k].shape for k in sd)
    assert isinstance(fused, nn.LayerNorm)
    x, r = torch.randn(3, 6), torch.randn(3, 6)
    fused.eval()
    assert torch.equal(fused(x, r), original["ln"](x + r))


def test_dropout_follows_training_flag_at_every_call() -> None:
    _, fused = _pair((32,), 0.5, torch.float32)
    x, r = torch.randn(8, 32), torch.randn(8, 32)
    no_dropout = F.layer_norm(x + r, (32,), fused.weight, fused.bias, fused.eps)
    fused.eval()
    assert torch.equal(fused(x, r), no_dropout)
    fused.train()
    assert not torch.equal(fused(x, r), no_dropout)
    fused.eval()
    assert torch.equal(fused(x, r), no_dropout)


def test_functional_matches_composition() -> None:
    x, r = torch.randn(2, 3, 10), torch.randn(2, 3, 10)
    w, b = torch.randn(10), torch.randn(10)
    torch.manual_seed(0)
    y = ak.dropout_add_layer_norm(x, r, (10,), w, b, 1e-6, 0.2, True)
    torch.manual_seed(0)
    y_ref = F.layer_norm(F.dropout(x, 0.2, True) + r, (10,), w, b, 1e-6)
    assert torch.equal(y, y_ref)
    no_dropout = ak.dropout_add_layer_norm(x, r, 10, w, b, 1e-6, 0.2, False)
    assert torch.equal(no_dropout, F.layer_norm(x + r, (10,), w, b, 1e-6))


def test_broadcast_residual_uses_reference_semantics() -> None:
    _, fused = _pair((8,), 0.0, torch.float32)
    x, r = torch.randn(4, 8), torch.randn(8)
    assert torch.equal(fused(x, r), F.layer_norm(x + r, (8,), fused.weight, fused.bias, fused.eps))


def test_constructor_validation_and_repr() -> None:
    with pytest.raises(ValueError, match="dropout probability"):
        ak.FusedDropoutAddLayerNorm(4, dropout=1.5)
    module = ak.FusedDropoutAddLayerNorm(4, 1e-6, dropout=0.25)
    assert module.eps == 1e-6 and type(module.dropout) is nn.Dropout and module.dropout.p == 0.25
    assert "(dropout): Dropout(p=0.25" in repr(module)
    assert list(module.state_dict()) == ["weight", "bias"]  # the LayerNorm's keys: a Dropout has no state


def test_the_dropout_is_a_module_the_model_tree_reaches() -> None:
    """Code that walks the model's modules to change its Dropouts (TRL's `disable_dropout_in_model` sets `p = 0` on
    every nn.Dropout) reaches the fused module's: in training it then drops nothing, as the original would not (the
    probability was a float the walk could not see)."""
    torch.manual_seed(0)
    module = ak.FusedDropoutAddLayerNorm(8, dropout=0.5).train()
    x, r = torch.randn(4, 8), torch.randn(4, 8)
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    assert torch.equal(module(x, r), F.layer_norm(x + r, (8,), module.weight, module.bias, module.eps))
    module.dropout.p = 0.5
    module.dropout.eval()  # a Dropout switched off alone
    assert torch.equal(module(x, r), F.layer_norm(x + r, (8,), module.weight, module.bias, module.eps))


# --- pre-LN: dropout_add_layer_norm_residual -------------------------------------------------------------------------


@pytest.mark.parametrize("functional", [False, True], ids=["dropout_module", "F.dropout"])
@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("training", [True, False])
def test_residual_form_bit_identical_under_same_seed(functional: bool, p: float, training: bool) -> None:
    """``(ln(h), h)`` with ``h = dropout(a) + x`` against the original statements, both outputs feeding the loss (a
    pre-LN block adds to ``h`` again), float64, the same seed for the dropout mask."""
    original, _ = _pair((6,), p, torch.float64)
    original.train(training)
    a = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    a2, x2 = (t.detach().clone().requires_grad_() for t in (a, x))
    gy, gh = torch.randn(3, 4, 6, dtype=torch.float64), torch.randn(3, 4, 6, dtype=torch.float64)

    torch.manual_seed(5)
    if functional:
        y, h = ak.dropout_add_layer_norm_residual(a, x, original["ln"], p=p, training=training)
    else:
        y, h = ak.dropout_add_layer_norm_residual(a, x, original["ln"], original["drop"])
    ours = torch.autograd.grad((y, h), [a, x, *original["ln"].parameters()], (gy, gh))
    torch.manual_seed(5)
    h_ref = x2 + (F.dropout(a2, p, training) if functional else original["drop"](a2))
    y_ref = original["ln"](h_ref)
    ref = torch.autograd.grad((y_ref, h_ref), [a2, x2, *original["ln"].parameters()], (gy, gh))

    assert torch.equal(y, y_ref) and torch.equal(h, h_ref)
    assert all(torch.equal(g, g_ref) for g, g_ref in zip(ours, ref))


def test_residual_form_functional_defaults_are_f_dropouts() -> None:
    torch.manual_seed(0)
    a, x = torch.randn(4, 8), torch.randn(4, 8)
    ln = nn.LayerNorm(8)
    torch.manual_seed(1)
    y, h = ak.dropout_add_layer_norm_residual(a, x, ln)
    torch.manual_seed(1)
    assert torch.equal(h, F.dropout(a) + x) and torch.equal(y, ln(h))  # p=0.5, training=True


# --- post-LN, the model's LayerNorm module: dropout_add_layer_norm_module -------------------------------------------


@pytest.mark.parametrize("functional", [False, True], ids=["dropout_module", "F.dropout"])
@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("training", [True, False])
def test_module_form_bit_identical_under_same_seed(functional: bool, p: float, training: bool) -> None:
    """``ln(dropout(a) + x)`` against the original statements (BART's `F.dropout(h, p=..., training=...)`; the add;
    the LayerNorm), float64, the same seed for the dropout mask: outputs and gradients equal bit for bit."""
    original, _ = _pair((6,), p, torch.float64)
    original.train(training)
    a = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    a2, x2 = (t.detach().clone().requires_grad_() for t in (a, x))
    gy = torch.randn(3, 4, 6, dtype=torch.float64)

    torch.manual_seed(5)
    if functional:
        y = ak.dropout_add_layer_norm_module(a, x, original["ln"], p=p, training=training)
    else:
        y = ak.dropout_add_layer_norm_module(a, x, original["ln"], original["drop"])
    ours = torch.autograd.grad(y, [a, x, *original["ln"].parameters()], gy)
    torch.manual_seed(5)
    y_ref = original["ln"](x2 + (F.dropout(a2, p, training) if functional else original["drop"](a2)))
    ref = torch.autograd.grad(y_ref, [a2, x2, *original["ln"].parameters()], gy)

    assert torch.equal(y, y_ref)
    assert all(torch.equal(g, g_ref) for g, g_ref in zip(ours, ref))


def test_module_form_functional_defaults_are_f_dropouts() -> None:
    """Left out, ``p`` and ``training`` are F.dropout's defaults (0.5, True: dropping out even in eval)."""
    a, x = torch.randn(4, 8), torch.randn(4, 8)
    ln = nn.LayerNorm(8).eval()
    torch.manual_seed(1)
    y = ak.dropout_add_layer_norm_module(a, x, ln)
    torch.manual_seed(1)
    assert torch.equal(y, ln(F.dropout(a) + x))
    assert not torch.equal(y, ln(a + x))


def test_module_form_calls_the_models_modules() -> None:
    """The reference path calls the LayerNorm module itself: a subclass's forward and hooks run as in the model."""

    class Scaled(nn.LayerNorm):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(input)

    a, x = torch.randn(3, 8), torch.randn(3, 8)
    norm = Scaled(8)
    norm.register_forward_hook(lambda module, args, out: out + 1)
    y = ak.dropout_add_layer_norm_module(a, x, norm, p=0.0)
    assert torch.equal(y, 2 * F.layer_norm(a + x, (8,)) + 1)

"""Triton kernels of adopter_kernels, run without a GPU through the interpreter, plus a compile check.

On a machine without CUDA the backend is forced to ``triton`` and CPU tensors go through Triton's
interpreter (``TRITON_INTERPRET=1``, numpy underneath: slow, so shapes are tiny). The interpreter must be
switched on before the process first imports triton (triton's own ``tl.*`` helpers are jitted at import),
so this module sets it at import; if triton was imported earlier by something else, these tests skip
(run ``python -m pytest tests/kernels/test_kernel_triton.py`` alone). With CUDA they run on the GPU.

``test_kernels_compile_for_sm90`` compiles every kernel variant to a CUDA binary for an H100 target in a
fresh process (no launch, no GPU needed): it catches what the interpreter does not (constexpr typing,
globals, lowering to PTX). Everything skips when triton is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import adopter_kernels as ak

CUDA = torch.cuda.is_available()
if not CUDA and "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first `import triton` in this process
triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
DEVICE = "cuda" if CUDA else "cpu"
ROOT = Path(__file__).resolve().parents[2]


def _interpreted() -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(triton.language.standard.sigmoid, InterpretedFunction)


@pytest.fixture
def kernels() -> Iterator[Dict[str, ModuleType]]:
    """The kernel modules, with the backend forced to triton (CUDA tensors, or CPU tensors interpreted)."""
    if not CUDA and not _interpreted():
        pytest.skip("triton was imported before TRITON_INTERPRET=1 was set: run this test file on its own")
    from adopter_kernels.triton_kernels import bias_activation, layer_norm, softmax

    with ak.use_backend("triton"):
        yield {"softmax": softmax, "layer_norm": layer_norm, "bias_activation": bias_activation}


def _tol(dtype: torch.dtype) -> dict:
    # No float64 here: the Triton kernels exist for float16/bfloat16/float32 and accumulate in float32 (float64
    # inputs take the torch path, checked below), so float32 against torch's float32 differs by rounding ~1e-7.
    # float16: kernel and reference round intermediates (grad_z, the GEMM inputs) at different points
    return {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.float16 else {"rtol": 1e-5, "atol": 1e-5}


def _ran(t: torch.Tensor, node: str) -> bool:
    """Whether autograd node ``node`` (e.g. a kernel's ``...Backward``) produced ``t``, a few views deep."""
    fn, depth = t.grad_fn, 0
    while fn is not None and depth < 4:
        if fn.name() == node:
            return True
        fn, depth = (fn.next_functions[0][0] if fn.next_functions else None), depth + 1
    return False


def _randn(*shape: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE).to(dtype).requires_grad_(requires_grad)


# --- softmax -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 5, 7), (4, 100), (2, 64)])
@pytest.mark.parametrize("max_block", [8192, 16])  # 16: the streamed (online-softmax) variant
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_softmax_kernel(
    kernels: Dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch, shape: tuple, max_block: int, dtype: torch.dtype
) -> None:
    monkeypatch.setattr(kernels["softmax"], "MAX_BLOCK", max_block)
    x = _randn(*shape, dtype=dtype, requires_grad=True)
    y = ak.softmax(x, -1)
    assert _ran(y, "_SoftmaxLastDimBackward") and y.dtype == dtype
    y_ref = F.softmax(x.float(), -1)
    torch.testing.assert_close(y.float(), y_ref, **_tol(dtype))
    g = _randn(*shape)
    (gx,) = torch.autograd.grad(y, x, g.to(dtype))
    (gx_ref,) = torch.autograd.grad(y_ref, x, g)
    torch.testing.assert_close(gx.float(), gx_ref.float(), **_tol(dtype))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy: -inf - -inf
@pytest.mark.parametrize("max_block", [8192, 2])
def test_softmax_kernel_masked_rows(
    kernels: Dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch, max_block: int
) -> None:
    monkeypatch.setattr(kernels["softmax"], "MAX_BLOCK", max_block)
    inf = float("inf")
    x = torch.tensor([[0.0, -inf, 1.0, -inf, 2.0], [-inf] * 5, [-inf, -inf, -inf, 3.0, -inf]], device=DEVICE)
    y, y_ref = ak.softmax(x, -1), F.softmax(x, -1)
    assert torch.equal(y.isnan(), y_ref.isnan())
    torch.testing.assert_close(y.nan_to_num(), y_ref.nan_to_num())


def test_softmax_dtype_arg_and_fallbacks(kernels: Dict[str, ModuleType]) -> None:
    x = _randn(3, 6, dtype=torch.float64, requires_grad=True)
    y = ak.softmax(x, dim=1, dtype=torch.float32)
    assert _ran(y, "_SoftmaxLastDimBackward") and y.dtype == torch.float32
    torch.testing.assert_close(y, F.softmax(x, 1, dtype=torch.float32))
    assert _ran(ak.softmax(x, -1), "SoftmaxBackward0")  # float64: torch
    assert _ran(ak.softmax(x.float(), 0), "SoftmaxBackward0")  # not the last dim
    assert _ran(ak.softmax(x.float().t(), -1), "SoftmaxBackward0")  # not contiguous


# --- dropout + add + LayerNorm ------------------------------------------------------------------------


@pytest.mark.parametrize("ln_kwargs", [{}, {"bias": False}, {"elementwise_affine": False}])
@pytest.mark.parametrize("normalized", [(24,), (3, 8)])
@pytest.mark.parametrize("training", [True, False])
def test_dropout_add_layer_norm_kernel_without_dropout(
    kernels: Dict[str, ModuleType], ln_kwargs: dict, normalized: tuple, training: bool
) -> None:
    # training with p=0, or eval with p>0 (dropout must be off): both are plain add + LayerNorm
    p = 0.0 if training else 0.3
    fused = ak.FusedDropoutAddLayerNorm(normalized, dropout=p, device=DEVICE, **ln_kwargs).train(training)
    ref = nn.LayerNorm(normalized, device=DEVICE, **ln_kwargs)
    with torch.no_grad():
        for param in fused.parameters():
            param.normal_()
    ref.load_state_dict(fused.state_dict())
    x = _randn(5, *normalized, requires_grad=True)
    r = _randn(5, *normalized, requires_grad=True)
    y = fused(x, r)
    assert _ran(y, "_DropoutAddLayerNormBackward")
    y_ref = ref(x + r)
    torch.testing.assert_close(y, y_ref)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, [x, r, *fused.parameters()], g)
    grads_ref = torch.autograd.grad(y_ref, [x, r, *ref.parameters()], g)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b)


def test_dropout_add_layer_norm_kernel_with_dropout(kernels: Dict[str, ModuleType]) -> None:
    p = 0.4
    fused = ak.FusedDropoutAddLayerNorm(32, dropout=p, device=DEVICE).train()
    with torch.no_grad():
        fused.weight.normal_()
        fused.bias.normal_()
    x = _randn(12, 32, requires_grad=True)
    r = _randn(12, 32, requires_grad=True)
    torch.manual_seed(7)
    y = fused(x, r)
    torch.manual_seed(7)
    assert torch.equal(fused(x, r), y)  # the seed comes from torch's generator: reproducible
    g = torch.randn_like(y)
    gx, gr, gw, gb = torch.autograd.grad(y, [x, r, fused.weight, fused.bias], g)
    keep = gx != 0  # the backward regenerates the mask: dropped inputs get no gradient
    assert 0.45 < keep.float().mean().item() < 0.75
    y_ref = F.layer_norm(x * keep / (1 - p) + r, (32,), fused.weight, fused.bias, fused.eps)
    torch.testing.assert_close(y, y_ref)
    for a, b in zip((gx, gr, gw, gb), torch.autograd.grad(y_ref, [x, r, fused.weight, fused.bias], g)):
        torch.testing.assert_close(a, b)
    everything_dropped = ak.dropout_add_layer_norm(x, r, 32, None, None, 1e-5, 1.0, True)
    torch.testing.assert_close(everything_dropped, F.layer_norm(r, (32,)))


def test_dropout_add_layer_norm_fallbacks(kernels: Dict[str, ModuleType]) -> None:
    fused = ak.FusedDropoutAddLayerNorm(8, dropout=0.0, device=DEVICE)
    x = _randn(3, 8, requires_grad=True)
    assert _ran(fused(x, _randn(8)), "NativeLayerNormBackward0")  # broadcast residual: torch
    assert _ran(fused(x, _randn(3, 8)), "_DropoutAddLayerNormBackward")
    x64 = _randn(3, 8, dtype=torch.float64, requires_grad=True)
    assert _ran(fused.double()(x64, x64), "NativeLayerNormBackward0")  # float64: torch


@pytest.mark.parametrize("functional", [False, True], ids=["dropout_module", "F.dropout"])
def test_dropout_add_layer_norm_residual_kernel(kernels: Dict[str, ModuleType], functional: bool) -> None:
    """The pre-LN form: the kernel also writes the sum, and the sum's own gradient joins the normalisation's."""
    ln = nn.LayerNorm(16, device=DEVICE)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    drop = nn.Dropout(0.0)
    x = _randn(6, 16, requires_grad=True)
    r = _randn(6, 16, requires_grad=True)
    if functional:
        y, s = ak.dropout_add_layer_norm_residual(x, r, ln, p=0.0, training=True)
    else:
        y, s = ak.dropout_add_layer_norm_residual(x, r, ln, drop)
    assert _ran(y, "_DropoutAddLayerNormBackward") and _ran(s, "_DropoutAddLayerNormBackward")
    s_ref = x + r
    y_ref = ln(s_ref)
    torch.testing.assert_close(s, s_ref)
    torch.testing.assert_close(y, y_ref)
    gy, gs = torch.randn_like(y), torch.randn_like(s)
    grads = torch.autograd.grad((y, s), [x, r, ln.weight, ln.bias], (gy, gs))
    grads_ref = torch.autograd.grad((y_ref, s_ref), [x, r, ln.weight, ln.bias], (gy, gs))
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b)
    only_normed = torch.autograd.grad(ak.dropout_add_layer_norm_residual(x, r, ln, drop)[0].sum(), [x])[0]
    torch.testing.assert_close(only_normed, torch.autograd.grad(ln(x + r).sum(), [x])[0])  # unused sum: zero grad


def test_dropout_add_layer_norm_residual_kernel_with_dropout(kernels: Dict[str, ModuleType]) -> None:
    drop = nn.Dropout(0.4).train()
    ln = nn.LayerNorm(32, device=DEVICE)
    x = _randn(12, 32, requires_grad=True)
    r = _randn(12, 32, requires_grad=True)
    y, s = ak.dropout_add_layer_norm_residual(x, r, ln, drop)
    keep = (s - r) != 0  # the stored sum shows the mask the kernel drew
    assert 0.45 < keep.float().mean().item() < 0.75
    torch.testing.assert_close(s, x * keep / 0.6 + r)
    torch.testing.assert_close(y, ln(x * keep / 0.6 + r))
    gx = torch.autograd.grad(s.sum(), [x])[0]
    torch.testing.assert_close(gx, keep / 0.6)  # the backward regenerates the same mask


def test_dropout_add_layer_norm_residual_fallbacks(kernels: Dict[str, ModuleType]) -> None:
    """Modules the kernel would bypass run as written: a LayerNorm subclass, a hook, an in-place Dropout."""
    x, r = _randn(3, 8, requires_grad=True), _randn(3, 8)

    class Scaled(nn.LayerNorm):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(input)

    y, _ = ak.dropout_add_layer_norm_residual(x, r, Scaled(8, device=DEVICE), p=0.0)
    torch.testing.assert_close(y, 2 * F.layer_norm(x + r, (8,)))
    hooked = nn.LayerNorm(8, device=DEVICE)
    hooked.register_forward_hook(lambda module, args, out: out * 3)
    y, _ = ak.dropout_add_layer_norm_residual(x, r, hooked, p=0.0)
    torch.testing.assert_close(y, 3 * F.layer_norm(x + r, (8,)))
    y, _ = ak.dropout_add_layer_norm_residual(x.detach(), r, nn.LayerNorm(8, device=DEVICE), nn.Dropout(0.0, inplace=True))
    assert not _ran(y, "_DropoutAddLayerNormBackward")


@pytest.mark.parametrize("functional", [False, True], ids=["dropout_module", "F.dropout"])
def test_dropout_add_layer_norm_module_kernel(kernels: Dict[str, ModuleType], functional: bool) -> None:
    """The post-LN form taking the model's LayerNorm (BART's functional dropout): the same kernel as the fused module,
    its mask from the dropout module's or the call's probability."""
    ln = nn.LayerNorm(16, device=DEVICE)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = _randn(6, 16, requires_grad=True)
    r = _randn(6, 16, requires_grad=True)
    if functional:
        y = ak.dropout_add_layer_norm_module(x, r, ln, p=0.0, training=True)
    else:
        y = ak.dropout_add_layer_norm_module(x, r, ln, nn.Dropout(0.0))
    assert _ran(y, "_DropoutAddLayerNormBackward")
    y_ref = ln(x + r)
    torch.testing.assert_close(y, y_ref)
    gy = torch.randn_like(y)
    for a, b in zip(
        torch.autograd.grad(y, [x, r, ln.weight, ln.bias], gy), torch.autograd.grad(y_ref, [x, r, ln.weight, ln.bias], gy)
    ):
        torch.testing.assert_close(a, b)
    torch.manual_seed(3)
    dropped = ak.dropout_add_layer_norm_module(x, r, ln, p=0.4, training=True)
    keep = torch.autograd.grad(dropped.sum(), [x])[0] != 0  # the backward regenerates the mask: dropped inputs get 0
    assert 0.45 < keep.float().mean().item() < 0.75
    torch.testing.assert_close(dropped, ln(x * keep / 0.6 + r))
    evaluated = ak.dropout_add_layer_norm_module(x, r, ln, p=0.4, training=False)
    torch.testing.assert_close(evaluated, y_ref)


def test_dropout_add_layer_norm_module_fallbacks(kernels: Dict[str, ModuleType]) -> None:
    """A LayerNorm the kernel would bypass (a subclass, a hook) runs as written."""
    x, r = _randn(3, 8, requires_grad=True), _randn(3, 8)
    hooked = nn.LayerNorm(8, device=DEVICE)
    hooked.register_forward_hook(lambda module, args, out: out * 3)
    y = ak.dropout_add_layer_norm_module(x, r, hooked, p=0.0)
    assert not _ran(y, "_DropoutAddLayerNormBackward")
    torch.testing.assert_close(y, 3 * F.layer_norm(x + r, (8,)))


class _RMSLike(nn.Module):
    """A norm a caller may pass as `norm_layer` where the code only makes nn.LayerNorm possible."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, n, device=DEVICE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class _ScaledDropout(nn.Dropout):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return 0.5 * super().forward(input)


class _LoRALinear(nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return super().forward(input) + 0.25 * input.sum(-1, keepdim=True)


def _global_forward_hook() -> object:
    return nn.modules.module.register_module_forward_hook(lambda module, args, out: out)


@pytest.mark.parametrize(
    "norm, dropout, hook",
    [
        (lambda: _RMSLike(8), lambda: nn.Dropout(0.0), False),
        (lambda: nn.GroupNorm(2, 8, device=DEVICE), lambda: nn.Dropout(0.0), False),
        (lambda: nn.LayerNorm(8, device=DEVICE), lambda: _ScaledDropout(0.0), False),
        (lambda: nn.LayerNorm(8, device=DEVICE), lambda: nn.Identity(), False),
        (lambda: nn.LayerNorm(8, device=DEVICE), lambda: nn.Dropout(0.0), True),
    ],
    ids=["rms-like norm", "group norm", "dropout subclass", "identity for dropout", "global hook"],
)
def test_guarded_dropout_add_layer_norm_forms_compute_the_modules_given(
    kernels: Dict[str, ModuleType], norm: object, dropout: object, hook: bool
) -> None:
    """ADP005 passes the model's modules to the forms that leave __init__ alone also where their types are only
    possible (`uncertain guarded`): any module the kernel would not compute exactly is called as written."""
    x, r = _randn(3, 8, requires_grad=True), _randn(3, 8)
    ln, drop = norm(), dropout()  # type: ignore[operator]
    handle = _global_forward_hook() if hook else None
    try:
        y = ak.dropout_add_layer_norm_module(x, r, ln, drop)
        y2, summed = ak.dropout_add_layer_norm_residual(x, r, ln, drop)
    finally:
        if handle is not None:
            handle.remove()  # type: ignore[attr-defined]
    expected = ln(drop(x) + r)
    for out in (y, y2):
        assert not _ran(out, "_DropoutAddLayerNormBackward")
        assert torch.equal(out, expected)
    assert torch.equal(summed, drop(x) + r)


@pytest.mark.parametrize(
    "linear, activation",
    [
        (lambda: _LoRALinear(4, 4, device=DEVICE), nn.GELU()),
        (lambda: nn.Linear(4, 4, device=DEVICE), _ScaledDropout(0.0)),
        (lambda: nn.Conv2d(4, 4, 1, device=DEVICE), nn.GELU()),  # timm's `linear_layer` with use_conv=True
    ],
    ids=["linear subclass", "activation of another kind", "conv for linear"],
)
def test_guarded_linear_bias_activation_computes_the_modules_given(
    kernels: Dict[str, ModuleType], linear: object, activation: nn.Module
) -> None:
    """ADP006 passes layers whose types are only possible (`act_layer=nn.GELU`): those the kernel would not compute
    exactly run as written."""
    layer = linear()  # type: ignore[operator]
    x = _randn(2, 4, 3, 3, requires_grad=True) if isinstance(layer, nn.Conv2d) else _randn(2, 4, requires_grad=True)
    y = ak.linear_bias_activation(x, layer, activation)
    assert not _ran(y, "_BiasActivationBackward")
    assert torch.equal(y, activation(layer(x)))


def test_fused_sequential_routes_linear_activation_pairs(kernels: Dict[str, ModuleType]) -> None:
    """ADP006 in nn.Sequential: a Linear followed by a recognised activation goes through the bias+activation
    kernel; symbolic tracing still records the two children as modules (create_feature_extractor's node names)."""
    torch.manual_seed(0)
    children = [nn.LayerNorm(8), nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.0), nn.Linear(16, 8), nn.ReLU()]
    fused, plain = ak.FusedSequential(*children).to(DEVICE), nn.Sequential(*children).to(DEVICE)
    x = _randn(3, 8, requires_grad=True)
    y, y_ref = fused(x), plain(x)
    assert _ran(y, "_BiasActivationBackward")
    torch.testing.assert_close(y, y_ref, **_tol(torch.float32))
    for a, b in zip(torch.autograd.grad(y.sum(), [x, *fused.parameters()]),
                    torch.autograd.grad(y_ref.sum(), [x, *plain.parameters()])):
        torch.testing.assert_close(a, b, **_tol(torch.float32))
    traced = torch.fx.symbolic_trace(fused)
    assert [n.target for n in traced.graph.nodes if n.op == "call_module"] == ["0", "1", "2", "3", "4", "5"]


def test_softmax_forms_take_the_kernel(kernels: Dict[str, ModuleType]) -> None:
    """torch.softmax and Tensor.softmax drop-ins reach the same row kernel as F.softmax's."""
    x = _randn(4, 33, requires_grad=True)
    for out in (ak.torch_softmax(x, -1), ak.tensor_softmax(x, dim=1), ak.tensor_softmax(x, -1, torch.float32)):
        assert _ran(out, "_SoftmaxLastDimBackward")
        torch.testing.assert_close(out, torch.softmax(x, -1))


# --- bias + activation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "activation,kwargs",
    [(nn.GELU(), {}), (F.gelu, {"approximate": "tanh"}), (nn.ReLU(), {}), (F.silu, {})],
    ids=["gelu", "gelu_tanh", "relu", "silu"],
)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bias_activation_kernel(
    kernels: Dict[str, ModuleType], activation: nn.Module, kwargs: dict, bias: bool, dtype: torch.dtype
) -> None:
    linear = nn.Linear(16, 33, bias=bias, device=DEVICE).to(dtype)  # 33 columns: bias index wraps mid-block
    x = _randn(2, 5, 16, dtype=dtype, requires_grad=True)
    y = ak.linear_bias_activation(x, linear, activation, **kwargs)
    assert _ran(y, "_BiasActivationBackward") and y.dtype == dtype
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, [x, *linear.parameters()], g)
    # reference in float32 so that float16 rounding of the reference itself does not dominate
    lin32 = nn.Linear(16, 33, bias=bias, device=DEVICE)
    lin32.load_state_dict({k: t.float() for k, t in linear.state_dict().items()})
    x32 = x.detach().float().requires_grad_()
    y_ref = activation(lin32(x32), **kwargs)
    torch.testing.assert_close(y.float(), y_ref, **_tol(dtype))
    for a, b in zip(grads, torch.autograd.grad(y_ref, [x32, *lin32.parameters()], g.float())):
        torch.testing.assert_close(a.float(), b, **_tol(dtype))


def test_bias_activation_unrecognised_uses_reference(kernels: Dict[str, ModuleType]) -> None:
    linear = nn.Linear(4, 4, device=DEVICE)
    x = _randn(2, 4, requires_grad=True)
    assert _ran(ak.linear_bias_activation(x, linear, F.gelu), "_BiasActivationBackward")
    for act in (nn.Tanh(), nn.Sigmoid(), lambda t: t * 2):
        y = ak.linear_bias_activation(x, linear, act)
        assert not _ran(y, "_BiasActivationBackward")
        assert torch.equal(y, act(linear(x)))


# --- compile (no launch) for an H100 -----------------------------------------------------------------

_COMPILE_SCRIPT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from adopter_kernels.triton_kernels import bias_activation as B, layer_norm as L, softmax as S

target = GPUTarget("cuda", 90, 32)
count = 0

def build(fn, sig, consts):
    global count
    sig = {**sig, **{k: "constexpr" for k in consts}}
    assert triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target).asm["cubin"]
    count += 1

for dt in ("*fp16", "*bf16", "*fp32"):
    for single in (True, False):
        build(S._softmax_fwd, {"X": dt, "Y": dt, "n_cols": "i32"}, {"BLOCK": 1024, "SINGLE": single})
        build(S._softmax_bwd, {"Y": dt, "DY": dt, "DX": dt, "n_cols": "i32"}, {"BLOCK": 1024, "SINGLE": single})
scalars = {"p": "fp32", "scale": "fp32", "seed": "i32"}
for dropout in (True, False):
    for residual_out in (False, True):  # the pre-LN form also writes the sum and takes its gradient
        flags = {"HAS_W": True, "HAS_B": not dropout, "DROPOUT": dropout, "BLOCK_N": 1024}
        fwd = {**{n: "*fp16" for n in "X R W B Y S".split()}, "Mean": "*fp32", "Rstd": "*fp32", "N": "i32",
               "eps": "fp32"}
        build(L._dal_fwd, {**fwd, **scalars}, {**flags, "STORE_SUM": residual_out})
        bwd = {**{n: "*fp16" for n in "X R W DY DS DX DR".split()}, **{n: "*fp32" for n in "Mean Rstd DW DB".split()}}
        build(L._dal_bwd, {**bwd, "M": "i32", "N": "i32", "rows_per_program": "i32", **scalars},
              {**flags, "HAS_DS": residual_out})
for act in B.ACTIVATIONS.values():
    flags = {"ACT": act, "HAS_BIAS": True, "BLOCK": 1024}
    build(B._bias_act_fwd, {"X": "*bf16", "B": "*bf16", "Y": "*bf16", "numel": "i64", "n": "i32"}, flags)
    bwd = {"X": "*fp16", "B": "*fp16", "DY": "*fp16", "DZ": "*fp16", "numel": "i64", "n": "i32"}
    build(B._bias_act_bwd, bwd, flags)
print("compiled", count)
"""


def test_kernels_compile_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE_SCRIPT],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0 and "ImportError" in proc.stderr and "triton.compiler" in proc.stderr:
        pytest.skip("this triton version has another compiler API")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compiled 28" in proc.stdout

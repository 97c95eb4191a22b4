"""ADP011-ADP013 Triton kernels (RMSNorm forward and backward, gated act*mul, rotary) run through Triton's CPU
interpreter (or on CUDA), plus a compile check of every kernel variant for an H100 target in a fresh process.

As in ``test_kernel_triton.py``: the interpreter must be switched on before the process first imports triton; when
triton was imported earlier without it, the interpreted tests skip (run this file on its own).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

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
def forced() -> Iterator[None]:
    if not CUDA and not _interpreted():
        pytest.skip("triton was imported before TRITON_INTERPRET=1 was set: run this test file on its own")
    with ak.use_backend("triton"):
        yield


def _tol(dtype: torch.dtype) -> dict:
    # Half precision: the kernel rounds once where eager rounds each op, and rsqrt/mean differ in the last fp32 bit,
    # which can move a rounded value by an ulp or two (bfloat16: 2^-8 relative).
    if dtype == torch.bfloat16:
        return {"rtol": 3e-2, "atol": 3e-2}
    return {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.float16 else {"rtol": 1e-5, "atol": 1e-5}


def _randn(*shape: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE).to(dtype).requires_grad_(requires_grad)


# --- ADP011 RMSNorm -----------------------------------------------------------------------------------------


class _Launches:
    """Stands in for a Triton kernel (``kernel[grid](...)``): records each launch's keyword arguments (the
    constexpr flags), then launches the real kernel."""

    def __init__(self, kernel: object) -> None:
        self.kernel = kernel
        self.flags: List[Dict[str, object]] = []

    def __getitem__(self, grid: object) -> Callable[..., object]:
        launch = self.kernel[grid]  # type: ignore[index]

        def run(*args: object, **kwargs: object) -> object:
            self.flags.append(kwargs)
            return launch(*args, **kwargs)

        return run


@pytest.fixture
def rms_launches(monkeypatch: pytest.MonkeyPatch) -> Dict[str, _Launches]:
    from adopter_kernels.triton_kernels import rms_norm as kernel

    counters = {name: _Launches(getattr(kernel, name)) for name in ("_rms_norm_fwd", "_rms_norm_bwd")}
    for name, counter in counters.items():
        monkeypatch.setattr(kernel, name, counter)
    return counters


def _rms_grads(
    x: torch.Tensor, w: torch.Tensor, cast: str, dy: torch.Tensor, fused: bool
) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(output, grad of ``x``, grad of ``w``) of ``ak.rms_norm`` (or the reference); ``None`` for one that does not
    require grad."""
    from adopter_kernels.rms_norm import _REFERENCE

    y = ak.rms_norm(x, w, 1e-6, cast) if fused else _REFERENCE[cast](x, w, 1e-6)
    wanted = [t for t in (x, w) if t.requires_grad]
    grads = iter(torch.autograd.grad(y, wanted, dy))
    return y, next(grads) if x.requires_grad else None, next(grads) if w.requires_grad else None


def _assert_rms_grads_match(
    x: torch.Tensor, w: torch.Tensor, cast: str, dy: torch.Tensor, launches: Dict[str, _Launches]
) -> None:
    with ak.use_backend("triton"):
        y, gx, gw = _rms_grads(x, w, cast, dy, fused=True)
    assert y.grad_fn is not None and y.grad_fn.name().startswith("_RMSNorm")
    ref, gx_ref, gw_ref = _rms_grads(x, w, cast, dy, fused=False)
    # Half precision: the reference rounds after each op (dy * w, each product of the weight's grad before the sum,
    # the two terms of x's grad), the kernels keep float32 until one final rounding: an ulp or two apart (_tol).
    tol = _tol(x.dtype)
    assert y.dtype == ref.dtype and y.shape == ref.shape
    torch.testing.assert_close(y.float(), ref.float(), **tol)
    for got, want in ((gx, gx_ref), (gw, gw_ref)):
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got.float(), want.float(), **tol)
    assert [f["STORE_RSTD"] for f in launches["_rms_norm_fwd"].flags] == [True]
    assert [(f["HAS_DX"], f["HAS_DW"]) for f in launches["_rms_norm_bwd"].flags] == [
        (x.requires_grad, w.requires_grad)
    ]


@pytest.mark.parametrize("cast", ["llama", "t5", "gemma", "olmo2", "helium"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm_kernel_matches_reference(
    forced: None, rms_launches: Dict[str, _Launches], cast: str, dtype: torch.dtype
) -> None:
    from adopter_kernels.rms_norm import _REFERENCE

    x, w = _randn(3, 5, 24, dtype=dtype) * 2, _randn(24, dtype=dtype, requires_grad=True)
    with torch.no_grad():  # inference with a trainable weight: nothing recorded, no rstd kept
        y = ak.rms_norm(x, w, 1e-6, cast)
        ref = _REFERENCE[cast](x, w, 1e-6)
    assert [f["STORE_RSTD"] for f in rms_launches["_rms_norm_fwd"].flags] == [False]
    assert y.grad_fn is None and not rms_launches["_rms_norm_bwd"].flags
    assert y.dtype == ref.dtype and y.shape == ref.shape
    torch.testing.assert_close(y.float(), ref.float(), **_tol(dtype))


@pytest.mark.parametrize("cast", ["llama", "t5", "gemma", "olmo2", "helium"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm_kernel_training_matches_reference_autograd(
    forced: None, rms_launches: Dict[str, _Launches], cast: str, dtype: torch.dtype
) -> None:
    # 15 rows: on CPU the backward's 4 programs take chunks of 4 rows, the last one short.
    x, w = _randn(3, 5, 24, dtype=dtype, requires_grad=True) * 2, _randn(24, dtype=dtype, requires_grad=True)
    _assert_rms_grads_match(x, w, cast, _randn(3, 5, 24, dtype=dtype), rms_launches)


@pytest.mark.parametrize("cast", ["llama", "gemma", "olmo2"])
def test_rms_norm_kernel_row_wider_than_a_warp_and_odd(
    forced: None, rms_launches: Dict[str, _Launches], cast: str
) -> None:
    x, w = _randn(10, 37, requires_grad=True), _randn(37, requires_grad=True)
    _assert_rms_grads_match(x, w, cast, _randn(10, 37), rms_launches)


def test_rms_norm_kernel_non_contiguous_3d_input_and_grad(forced: None, rms_launches: Dict[str, _Launches]) -> None:
    x = _randn(5, 3, 24, requires_grad=True).transpose(0, 1)  # [3, 5, 24], a view of [5, 3, 24]
    dy = _randn(24, 5, 3).permute(2, 1, 0)  # a non-contiguous incoming gradient
    assert not x.is_contiguous() and not dy.is_contiguous()
    _assert_rms_grads_match(x, _randn(24, requires_grad=True), "llama", dy, rms_launches)


def test_rms_norm_row_wider_than_the_kernel_takes_reference(
    forced: None, rms_launches: Dict[str, _Launches], monkeypatch: pytest.MonkeyPatch
) -> None:
    from adopter_kernels.rms_norm import _REFERENCE
    from adopter_kernels.triton_kernels import rms_norm as kernel

    monkeypatch.setattr(kernel, "MAX_N", 16)  # a row of 24 is then too wide for registers
    x, w = _randn(4, 24, requires_grad=True), _randn(24, requires_grad=True)
    y = ak.rms_norm(x, w, 1e-6, "llama")
    assert not rms_launches["_rms_norm_fwd"].flags
    torch.testing.assert_close(y, _REFERENCE["llama"](x, w, 1e-6), rtol=0, atol=0)


@pytest.mark.parametrize("cast", ["llama", "gemma", "olmo2"])
@pytest.mark.parametrize("x_grad", [True, False])
def test_rms_norm_kernel_only_x_or_only_weight_requires_grad(
    forced: None, rms_launches: Dict[str, _Launches], cast: str, x_grad: bool
) -> None:
    x, w = _randn(6, 24, requires_grad=x_grad), _randn(24, requires_grad=not x_grad)
    _assert_rms_grads_match(x, w, cast, _randn(6, 24), rms_launches)


def test_rms_norm_on_cuda_selects_triton_for_inference_only() -> None:
    """Measured on an H200: inference 1.5-2.1x faster, a training step no faster (docs/KERNEL_PERFORMANCE.md)."""
    selects = ak.backends()["rms_norm"]["auto_selects"]
    assert selects["cuda float32 infer"] == selects["cuda bfloat16 infer"] == "triton"  # type: ignore[index]
    assert selects["cuda float32 train"] == selects["cuda bfloat16 train"] == "reference"  # type: ignore[index]


# --- ADP012 gated act * mul -----------------------------------------------------------------------------------


_ACTS = [
    (nn.SiLU(), {}),
    (F.gelu, {}),
    (F.gelu, {"approximate": "tanh"}),
    (torch.relu, {}),
]


@pytest.mark.parametrize("act,kw", _ACTS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gated_linear_unit_kernel(forced: None, act: object, kw: dict, bias: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    gate, up = nn.Linear(8, 12, bias=bias).to(DEVICE, dtype), nn.Linear(8, 12, bias=not bias).to(DEVICE, dtype)
    x = _randn(2, 3, 8, dtype=dtype, requires_grad=True)
    y = ak.gated_linear_unit(x, gate, up, act, **kw)
    assert y.grad_fn is not None and y.grad_fn.name().startswith("_GatedActivation")
    xr = x.detach().float().requires_grad_(True)
    gate_r, up_r = nn.Linear(8, 12, bias=bias).to(DEVICE), nn.Linear(8, 12, bias=not bias).to(DEVICE)
    gate_r.load_state_dict({k: v.float() for k, v in gate.state_dict().items()})
    up_r.load_state_dict({k: v.float() for k, v in up.state_dict().items()})
    ref = act(gate_r(xr), **kw) * up_r(xr)
    torch.testing.assert_close(y.float(), ref, **_tol(dtype))
    g = _randn(2, 3, 12)
    grads = torch.autograd.grad(y, [x, gate.weight, up.weight], g.to(dtype))
    grads_ref = torch.autograd.grad(ref, [xr, gate_r.weight, up_r.weight], g)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a.float(), b, **_tol(dtype))


def test_gated_linear_unit_unrecognised_activation_takes_reference(forced: None) -> None:
    gate, up = nn.Linear(4, 6).to(DEVICE), nn.Linear(4, 6).to(DEVICE)
    x = _randn(3, 4)
    y = ak.gated_linear_unit(x, gate, up, torch.tanh)
    assert y.grad_fn is not None and y.grad_fn.name() == "MulBackward0"
    torch.testing.assert_close(y, torch.tanh(gate(x)) * up(x))


# --- ADP013 rotary ---------------------------------------------------------------------------------------------


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cos_shape", [(2, 1, 5, 8), (1, 1, 5, 8), (5, 8)])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_kernel(forced: None, dtype: torch.dtype, cos_shape: tuple, interleaved: bool) -> None:
    x = _randn(2, 3, 5, 8, dtype=dtype, requires_grad=True)
    angles = torch.rand(cos_shape, device=DEVICE) * 6
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    y = ak.rotary_embedding(x, cos, sin, interleaved=interleaved)
    assert y.grad_fn is not None and y.grad_fn.name().startswith("_Rotary")
    xr = x.detach().float().requires_grad_(True)
    rotate = _rotate_every_two if interleaved else _rotate_half
    ref = (xr * cos.float()) + (rotate(xr) * sin.float())
    torch.testing.assert_close(y.float(), ref, **_tol(dtype))
    g = _randn(2, 3, 5, 8)
    (gx,) = torch.autograd.grad(y, x, g.to(dtype))
    (gx_ref,) = torch.autograd.grad(ref, xr, g)
    torch.testing.assert_close(gx.float(), gx_ref, **_tol(dtype))


def test_rotary_non_contiguous_input_and_fallbacks(forced: None) -> None:
    x = _randn(2, 5, 3, 8).transpose(1, 2)  # [b, h, s, d] as a view of [b, s, h, d], like HF's q
    cos, sin = _randn(5, 8), _randn(5, 8)
    torch.testing.assert_close(ak.rotary_embedding(x, cos, sin), (x * cos) + (_rotate_half(x) * sin))
    odd = _randn(2, 3, 5, 7)
    y = ak.rotary_embedding(odd, _randn(5, 7), _randn(5, 7))  # odd last dim: reference path
    assert y.shape == odd.shape
    three_d = _randn(3, 5, 8, requires_grad=True)
    assert ak.rotary_embedding(three_d, cos, sin).grad_fn.name() == "AddBackward0"


# --- compile check ---------------------------------------------------------------------------------------------

_COMPILE_SCRIPT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from adopter_kernels.triton_kernels import gated_activation as G, rms_norm as R, rotary as Q

target = GPUTarget("cuda", 90, 32)
count = 0

def build(fn, sig, consts):
    global count
    sig = {**sig, **{k: "constexpr" for k in consts}}
    assert triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target).asm["cubin"]
    count += 1

for dt in ("*fp16", "*bf16", "*fp32"):
    for late_round, offset in ((False, 0.0), (True, 1.0), (True, 0.0)):  # LLaMA/T5, Gemma, OLMo2/Helium
        weighting = {"LATE_ROUND": late_round, "OFFSET": offset}
        for store_rstd in (True, False):
            sig = {"X": dt, "W": dt, "Y": dt, "Rstd": "*fp32", "n_cols": "i32", "eps": "fp32"}
            build(R._rms_norm_fwd, sig, {"BLOCK": 4096, **weighting, "STORE_RSTD": store_rstd})
        for has_dx, has_dw in ((True, True), (True, False), (False, True)):
            sig = {"X": dt, "W": dt, "DY": dt, "Rstd": "*fp32", "DX": dt, "DW": "*fp32", "n_rows": "i32",
                   "n_cols": "i32", "rows_per_program": "i32"}
            build(R._rms_norm_bwd, sig, {"BLOCK": 4096, **weighting, "HAS_DX": has_dx, "HAS_DW": has_dw})
    for backward in (True, False):
        for interleaved in (True, False):
            sig = {"X": dt, "C": dt, "S": dt, "Y": dt, "numel": "i64", "d1": "i32", "d2": "i32", "D": "i32"}
            sig.update({f"{t}s{i}": "i64" for t in "cs" for i in range(4)})
            build(Q._rotary, sig, {"BACKWARD": backward, "INTERLEAVED": interleaved, "BLOCK": 1024})
for act in range(4):
    build(G._gated_fwd, {"P": "*bf16", "Y": "*bf16", "numel": "i64", "n": "i32"}, {"ACT": act, "BLOCK": 1024})
    build(G._gated_bwd, {"P": "*fp16", "DY": "*fp16", "DP": "*fp16", "numel": "i64", "n": "i32"}, {"ACT": act, "BLOCK": 1024})
print("compiled", count)
"""


def test_llm_block_kernels_compile_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE_SCRIPT],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0 and "ImportError" in proc.stderr and "triton.compiler" in proc.stderr:
        pytest.skip("this triton version has another compiler API")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compiled 65" in proc.stdout

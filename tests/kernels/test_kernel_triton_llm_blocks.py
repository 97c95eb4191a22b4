"""ADP011-ADP013 Triton kernels (RMSNorm forward, gated act*mul, rotary) run through Triton's CPU interpreter (or on
CUDA), plus a compile check of every kernel variant for an H100 target in a fresh process.

As in ``test_kernel_triton.py``: the interpreter must be switched on before the process first imports triton; when
triton was imported earlier without it, the interpreted tests skip (run this file on its own).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

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


@pytest.mark.parametrize("cast", ["llama", "t5", "gemma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm_kernel_matches_reference(
    forced: None, monkeypatch: pytest.MonkeyPatch, cast: str, dtype: torch.dtype
) -> None:
    from adopter_kernels.rms_norm import _REFERENCE
    from adopter_kernels.triton_kernels import rms_norm as kernel

    launched = []
    original = kernel.rms_norm_forward
    monkeypatch.setattr(kernel, "rms_norm_forward", lambda *a, **k: launched.append(1) or original(*a, **k))
    x, w = _randn(3, 5, 24, dtype=dtype) * 2, _randn(24, dtype=dtype)
    with torch.no_grad():
        y = ak.rms_norm(x, w, 1e-6, cast)
    assert launched == [1]
    ref = _REFERENCE[cast](x, w, 1e-6)
    assert y.dtype == ref.dtype and y.shape == ref.shape
    torch.testing.assert_close(y.float(), ref.float(), **_tol(dtype))
    if dtype == torch.float32:
        # The reference path takes over when a gradient is needed: same function, so a wrong dispatch shows here.
        wg = w.clone().requires_grad_(True)
        torch.testing.assert_close(ak.rms_norm(x, wg, 1e-6, cast), ref)
        assert ak.rms_norm(x, wg, 1e-6, cast).grad_fn is not None


def test_rms_norm_kernel_row_wider_than_a_warp_and_odd(forced: None) -> None:
    from adopter_kernels.rms_norm import _REFERENCE

    x, w = _randn(4, 37), _randn(37)
    with torch.no_grad():
        torch.testing.assert_close(ak.rms_norm(x, w, 1e-5, "llama"), _REFERENCE["llama"](x, w, 1e-5), **_tol(x.dtype))


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
    for gemma in (True, False):
        build(R._rms_norm_fwd, {"X": dt, "W": dt, "Y": dt, "n_cols": "i32", "eps": "fp32"}, {"BLOCK": 4096, "GEMMA": gemma})
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
    assert "compiled 26" in proc.stdout

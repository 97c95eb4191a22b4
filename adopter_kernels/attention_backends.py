"""Attention cores of the ADP001-ADP003 subclasses: SDPA, xformers' memory-efficient attention, or the original.

Three kernels are registered with ``_dispatch`` (``bert_self_attention``, ``t5_attention``, ``gpt2_attention``),
each with the backends

* ``xformers``: ``xformers.ops.memory_efficient_attention`` (CUDA, when xformers is installed). ``auto`` uses it
  only where it is *measured* faster than SDPA: the first call with a given shape, dtype and mode times both on
  that call's inputs (``_Tuner``) and the winner is kept for later calls of that kind. Forced
  (``ADOPTER_KERNELS_BACKEND=bert_self_attention=xformers``) it runs without timing.
* ``sdpa``: ``F.scaled_dot_product_attention`` (what the subclasses always used).
* ``reference``: the original class's eager ``forward`` (``super().forward``).

``fast_attention`` computes ``softmax(q @ k^T * scale + mask) @ v`` (with dropout) on ``[B, H, S, D]`` tensors with
the chosen backend; both fast backends take the same additive float mask, so the result is the same function.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
import types
from typing import Callable, Dict, Hashable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ._dispatch import Backend, Call, _never, forced, register_kernel

__all__ = ["ATTENTION_KERNELS", "fast_attention", "xformers_ops"]

ATTENTION_KERNELS = ("bert_self_attention", "t5_attention", "gpt2_attention", "bart_attention")


def xformers_ops() -> Optional[types.ModuleType]:
    """``xformers.ops``, or None when it cannot be imported (imported lazily: it initialises CUDA)."""
    try:
        return importlib.import_module("xformers.ops")
    except Exception:  # ImportError, or a build that does not match this torch
        return None


def _xformers_reason() -> Optional[str]:
    if not torch.cuda.is_available():
        return "no CUDA device (xformers' attention is CUDA-only)"
    if xformers_ops() is None:
        return "xformers is not installed (pip install xformers)"
    return None


def _sdpa_faster(call: Call) -> bool:
    # benchmarks/bench_kernels.py, bench_attention_lengths.py and gpu_bench (docs/KERNEL_PERFORMANCE.md): on CPU SDPA
    # beat the eager attention in float32 (inference and training) at every size, and with bfloat16 compute (bfloat16
    # inference; float32 layers under bfloat16 autocast) and float16 compute (float16 layers; float32 ones under float16
    # autocast) only on large enough attention: the subclasses add that size test (attention._sdpa_pays: the
    # decision sees no shapes); bfloat16 training was not faster. On an H200 it beat BERT's and GPT-2's eager
    # attention in every dtype and mode (1.2-1.8x).
    if call.device == "cuda":
        return True
    if call.device == "cpu":
        return call.dtype in (torch.float32, torch.float16) or (call.dtype == torch.bfloat16 and not call.grad)
    return False


XFORMERS = Backend(
    "xformers",
    "CUDA with xformers installed, for the shapes/dtype/mode where timing both on the first such call found it "
    "faster than SDPA",
    available=_xformers_reason,
    supports=lambda call: call.device == "cuda",
    faster=lambda call: call.device == "cuda",  # a candidate only: _Tuner measures it against SDPA per shape
)
SDPA = Backend(
    "sdpa",
    "CUDA (1.2-1.8x on an H200); CPU float32 (inference and training, 0.98-2.00x from 16 to 512 keys), with "
    "bfloat16 compute (bfloat16 inference, float32 layers under bfloat16 autocast) from 4x12x512x512 attention scores "
    "(batch x heads x queries x keys) in rows of 512 keys (1.13-1.95x there; mostly 0.71-0.99x below), and with "
    "float16 compute (float16 layers, float32 ones under float16 autocast) from 4x12x16x16 scores in inference "
    "(1.00-3.31x; GPT-2 0.97-1.03x up to 128 keys, within noise) and 4x12x64x64 in rows of 64 keys in training "
    "(1.00-1.17x; 0.94-0.98x below), where it measured faster than the eager attention; elsewhere (smaller "
    "attention, bfloat16 layers in training, other devices) the original forward runs",
    faster=_sdpa_faster,
)


def _sdpa_t5_faster(call: Call) -> bool:
    # T5 (no scaling, a full [B, H, S, S] position-bias mask) measured no faster with SDPA on CPU in float32 and in
    # training with bfloat16 compute (bfloat16 layers or autocast), faster in inference with bfloat16 compute on large
    # attention and with float16 compute (layers or autocast) from a size in both modes (the subclass's size test,
    # attention._sdpa_pays, keeps it there); on an H200 slower in every dtype and mode (0.78-0.94x: the float mask
    # rules out the flash kernel). docs/KERNEL_PERFORMANCE.md.
    if call.device != "cpu":
        return False
    return call.compute == torch.float16 or (call.compute == torch.bfloat16 and not call.grad)


SDPA_T5 = Backend(
    "sdpa",
    "CPU inference with bfloat16 compute (bfloat16 layers, float32 ones under bfloat16 autocast) from 4x12x512x512 "
    "attention scores in rows of 512 keys, where it measured faster than T5's eager attention (1.26-1.47x; bfloat16 "
    "layers 0.99-1.05x below 256 keys, autocast 0.92-0.94x at batch 4 below 512); CPU float16 compute (float16 "
    "layers, float32 ones under float16 autocast) from 4x12x16x16 scores in inference (1.02-2.43x) and 4x12x64x64 in "
    "rows of 64 keys in training (1.04-1.36x). CPU float32, training with bfloat16 compute (0.77-1.05x) and smaller "
    "attention measured no faster, CUDA (an H200) slower: the original forward runs there",
    faster=_sdpa_t5_faster,
)
register_kernel("bert_self_attention", XFORMERS, SDPA, doc="ADP001 attention core of the SDPA subclass")
# T5 with xformers: never timed against the original, and SDPA (its rival in the per-shape timing) lost to the original
# on an H200; so xformers runs T5 only when forced.
XFORMERS_FORCED_ONLY = dataclasses.replace(
    XFORMERS,
    where="only when forced (t5_attention=xformers): not measured against T5's original attention",
    faster=_never,
)
register_kernel("t5_attention", XFORMERS_FORCED_ONLY, SDPA_T5, doc="ADP002 attention core of the SDPA subclass")
register_kernel("gpt2_attention", XFORMERS, SDPA, doc="ADP003 attention core of the SDPA subclass")
# BART's core is BERT's (scaled scores plus an additive [B, 1, T, S] float mask, no position bias), so the SDPA call
# is the one measured for ADP001/ADP003; on CPU it was also measured on BART itself (docs/KERNEL_PERFORMANCE.md).
register_kernel("bart_attention", XFORMERS, SDPA, doc="ADP014 attention core of the SDPA subclass")


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], p: float, causal: bool, scale: float) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal, scale=scale)


def _xformers(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], p: float, causal: bool, scale: float) -> Tensor:
    ops = xformers_ops()
    assert ops is not None  # only selected when available
    bias: object = None
    if causal:
        bias = ops.LowerTriangularMask()
    elif mask is not None:
        # xformers wants a [B, H, Sq, Sk] bias; expand() keeps HF's broadcast [B, 1, 1, Sk] masks as strides.
        bias = mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    # xformers works on [B, S, H, D].
    out = ops.memory_efficient_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_bias=bias, p=p, scale=scale
    )
    return out.transpose(1, 2)


Core = Callable[[Tensor, Tensor, Tensor, Optional[Tensor], float, bool, float], Tensor]
_CORES: Dict[str, Core] = {"sdpa": _sdpa, "xformers": _xformers}


class _Tuner:
    """Remembers, per kind of call, which of xformers and SDPA was faster when both were timed on it."""

    def __init__(self, repeats: int = 3, clock: Callable[[], float] = time.perf_counter) -> None:
        self.repeats = repeats
        self.clock = clock
        self.winners: Dict[Hashable, str] = {}

    @staticmethod
    def key(q: Tensor, k: Tensor, mask: Optional[Tensor], p: float, causal: bool) -> Hashable:
        mask_shape = None if mask is None else tuple(mask.shape)
        return (q.device, q.dtype, tuple(q.shape), tuple(k.shape), mask_shape, p > 0, causal, torch.is_grad_enabled())

    def _time(self, core: Core, args: Tuple[Tensor, Tensor, Tensor, Optional[Tensor], float, bool, float]) -> float:
        sync = torch.cuda.synchronize if args[0].is_cuda else (lambda: None)
        best = float("inf")
        for _ in range(self.repeats + 1):  # the first call warms up (kernel selection, allocations)
            q, k, v = (t.detach().requires_grad_(t.requires_grad) for t in args[:3])
            sync()
            start = self.clock()
            out = core(q, k, v, *args[3:])
            if out.requires_grad:
                out.sum().backward()
            sync()
            best = min(best, self.clock() - start)
        return best

    def choose(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], p: float, causal: bool,
               scale: float) -> str:
        key = self.key(q, k, mask, p, causal)
        if key not in self.winners:
            args = (q, k, v, mask, p, causal, scale)
            # With dropout the timing runs draw random numbers: keep the caller's RNG stream unchanged.
            with torch.random.fork_rng(devices=[q.device] if q.is_cuda else []):
                times = {name: self._time(_CORES[name], args) for name in ("sdpa", "xformers")}
            self.winners[key] = min(times, key=lambda name: times[name])
        return self.winners[key]


TUNER = _Tuner()


def fast_attention(kernel: str, backend: str, query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor],
                   dropout_p: float, is_causal: bool, scale: float) -> Tensor:
    """Attention on ``[B, H, S, D]`` with ``backend`` (``sdpa`` or ``xformers``, as ``select`` chose for ``kernel``)."""
    if backend == "xformers" and forced(kernel) == "auto" and not torch.compiler.is_compiling():
        backend = TUNER.choose(query, key, value, mask, dropout_p, is_causal, scale)
    elif backend == "xformers" and torch.compiler.is_compiling():
        backend = "sdpa"  # the compiler knows SDPA (and its own fused kernels); xformers would be a graph break
    return _CORES[backend](query, key, value, mask, dropout_p, is_causal, scale)

"""Each adopter_kernels op against the original computation it replaces, on this machine. A script, not a test:

    python benchmarks/bench_kernels.py                         # CPU, float32 + bfloat16, small + base shapes
    python benchmarks/bench_kernels.py --dtypes float32 --shapes base --repeats 30 --kernels conv_bn2d
    python benchmarks/bench_kernels.py --device cuda           # on a GPU: small, base and large shapes
    python benchmarks/bench_kernels.py --shapes tiny --force reference   # the Python cost of a call on its way to
                                                                         # the original computation

For every kernel, dtype, shape class and mode (``infer``: eval + ``inference_mode``; ``train``: training mode,
forward + backward) it prints the median time of the original and of the kernel, their spread (IQR / median),
and ``speedup = original median / kernel median``. Both sides are timed in alternating rounds (original, kernel,
original, ...) so load changes on a shared machine hit both alike. "Kernel" is what rewritten code calls, run with
its fast backend forced (``--force``, default: every kernel's non-reference backend, Triton's only off CPU), so the
figures say where that backend is faster; the ``auto`` column says what dispatch picks for such a call today.

The verdict column reads ``faster``/``slower`` only when the two interquartile ranges do not overlap, otherwise
``same`` (within noise). docs/KERNEL_PERFORMANCE.md records a run and the dispatch decisions taken from it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
import adopter_kernels as ak  # noqa: E402
from adopter_kernels import _dispatch  # noqa: E402
from adopter_kernels.attention import _sdpa_pays as _class_sdpa_pays  # noqa: E402
from adopter_kernels.attention_core import _sdpa_pays  # noqa: E402

Fn = Callable[[], object]


@dataclass
class Case:
    """One comparison: ``original`` and ``kernel`` compute the same thing on the same modules and inputs."""

    kernel: str
    shape: str
    mode: str
    original: Fn
    fused: Fn
    backend: str


def _train(forward: Callable[[], torch.Tensor | Tuple[torch.Tensor, ...]]) -> Fn:
    """Forward + backward of ``sum(mean(out))`` over every output (parameters and inputs accumulate grads)."""

    def step() -> None:
        out = forward()
        outs = out if isinstance(out, tuple) else (out,)
        sum(o.float().mean() for o in outs).backward()

    return step


def _infer(forward: Callable[[], object]) -> Fn:
    def call() -> None:
        with torch.inference_mode():
            forward()

    return call


SHAPES: Dict[str, Dict[str, Tuple[int, ...]]] = {
    # (batch, seq, hidden, heads) for sequence ops; (batch, channels, side) for conv; (rows, in, out) for linear_bn.
    # Next to no work: the time is the Python and dispatch cost of a call (with --force reference: what a rewritten
    # model pays per kernel call where the original computation runs).
    "tiny": {"seq": (1, 4, 8, 2), "conv": (1, 2, 4), "rows": (2, 4, 4)},
    "small": {"seq": (2, 16, 64, 4), "conv": (2, 16, 16), "rows": (8, 32, 64)},
    "base": {"seq": (4, 128, 768, 12), "conv": (8, 64, 56), "rows": (512, 768, 4096)},
    # Memory-bound sizes for a GPU (an attention softmax of 8 x 16 x 1024 x 1024, 1024 keys for the attention core):
    # where the fused kernels save whole passes over memory rather than launches. Heavy on CPU.
    "large": {"seq": (8, 1024, 1024, 16), "conv": (64, 64, 56), "rows": (4096, 1024, 4096)},
}


def _bert_config(hidden: int, heads: int):
    import transformers

    return transformers.BertConfig(hidden_size=hidden, num_attention_heads=heads, attention_probs_dropout_prob=0.0)


def _gpt2_config(hidden: int, heads: int, seq: int):
    import transformers

    return transformers.GPT2Config(n_embd=hidden, n_head=heads, n_positions=max(seq, 64), attn_pdrop=0.0,
                                   resid_pdrop=0.0)


#: The attention kernels whose fast path is an SDPA subclass of a transformers attention class (ADP001-ADP003, ADP014).
ATTENTION_CLASSES = ("bert_self_attention", "t5_attention", "gpt2_attention", "bart_attention")


def attention_class_pair(kernel: str, batch: int, seq: int, hidden: int, heads: int, dtype: torch.dtype,
                         device: torch.device) -> Tuple[nn.Module, nn.Module, torch.Tensor, Dict[str, object]]:
    """``(original, sdpa, hidden_states, keyword arguments)`` for one of ``ATTENTION_CLASSES``: the transformers class
    the kernel's subclass mirrors and that subclass, built alike (same weights), a ``[batch, seq, hidden]`` input
    requiring grad, and the arguments its model passes: a padding mask on the last sample (its last quarter), in the
    class's own layout; T5's first layer computes its relative position bias, GPT-2 adds its causal mask."""
    import transformers
    from transformers.models.bart.modeling_bart import BartAttention
    from transformers.models.bert.modeling_bert import BertSelfAttention
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
    from transformers.models.t5.modeling_t5 import T5Attention

    kw = dict(device=device, dtype=dtype)
    states = torch.randn(batch, seq, hidden, **kw).requires_grad_()
    mask = torch.zeros(batch, 1, 1, seq, **kw)
    mask[-1, ..., seq - seq // 4:] = torch.finfo(dtype).min
    build: Callable[[type], nn.Module]
    call_kw: Dict[str, object] = {"attention_mask": mask}
    if kernel == "bert_self_attention":
        cls, sdpa_cls = BertSelfAttention, ak.bert_self_attention_sdpa(BertSelfAttention)
        build = lambda c: c(_bert_config(hidden, heads))  # noqa: E731
    elif kernel == "t5_attention":
        config = transformers.T5Config(d_model=hidden, d_kv=hidden // heads, num_heads=heads, dropout_rate=0.0)
        cls, sdpa_cls, call_kw = T5Attention, ak.t5_attention_sdpa(T5Attention), {"mask": mask}
        build = lambda c: c(config, has_relative_attention_bias=True)  # noqa: E731
    elif kernel == "gpt2_attention":
        cls, sdpa_cls = GPT2Attention, ak.gpt2_attention_sdpa(GPT2Attention)
        build = lambda c: c(_gpt2_config(hidden, heads, seq))  # noqa: E731
    elif kernel == "bart_attention":
        # BART's encoder passes its padding mask expanded to [batch, 1, queries, keys].
        cls, sdpa_cls = BartAttention, ak.bart_attention_sdpa(BartAttention)
        call_kw = {"attention_mask": mask.expand(batch, 1, seq, seq)}
        build = lambda c: c(hidden, heads, dropout=0.0)  # noqa: E731
    else:
        raise KeyError(kernel)
    torch.manual_seed(0)
    original = build(cls).to(**kw)
    torch.manual_seed(0)
    sdpa = build(sdpa_cls).to(**kw)
    return original, sdpa, states, call_kw


def build_cases(kernel: str, shape: str, dtype: torch.dtype, device: torch.device) -> List[Tuple[str, Fn, Fn, str]]:
    """``[(mode, original, kernel, backend)]`` for one kernel at one shape class and dtype."""
    b, s, h, heads = SHAPES[shape]["seq"]
    kw = dict(device=device, dtype=dtype)

    def x(*size: int, grad: bool = True) -> torch.Tensor:
        return torch.randn(*size, **kw).requires_grad_(grad)

    def both(make: Callable[[bool], Tuple[Fn, Fn]], modules: Sequence[nn.Module] = ()) -> List[Tuple[str, Fn, Fn]]:
        out = []
        for mode in ("infer", "train"):
            for m in modules:
                m.train(mode == "train")
            orig, fused = make(mode == "train")
            wrap = _train if mode == "train" else _infer
            out.append((mode, wrap(orig), wrap(fused)))
        return out

    if kernel == "softmax":
        scores = x(b * heads, s, s)
        rows = both(lambda _: (lambda: F.softmax(scores, dim=-1), lambda: ak.softmax(scores, dim=-1)))
        return [(m, o, k, _dispatch.select("softmax", scores, training=m == "train")) for m, o, k in rows]
    if kernel == "dropout_add_layer_norm":
        a, r = x(b, s, h), x(b, s, h)
        drop, ln = nn.Dropout(0.1), nn.LayerNorm(h).to(**kw)
        fused = ak.FusedDropoutAddLayerNorm(h, dropout=0.1).to(**kw)
        fused.load_state_dict(ln.state_dict())
        rows = both(lambda _: (lambda: ln(drop(a) + r), lambda: fused(a, r)), (drop, ln, fused))
        return [(m, o, k, _dispatch.select("dropout_add_layer_norm", a, training=m == "train")) for m, o, k in rows]
    if kernel == "linear_bias_activation":
        a = x(b, s, h)
        lin, act = nn.Linear(h, 4 * h).to(**kw), nn.GELU()
        rows = both(lambda _: (lambda: act(lin(a)), lambda: ak.linear_bias_activation(a, lin, act)), (lin,))
        return [(m, o, k, _dispatch.select("linear_bias_activation", a, training=m == "train")) for m, o, k in rows]
    if kernel == "conv_bn2d":
        n, c, side = SHAPES[shape]["conv"]
        img = x(n, c, side, side)
        conv, bn = nn.Conv2d(c, c, 3, padding=1, bias=False).to(**kw), nn.BatchNorm2d(c).to(**kw)
        rows = both(lambda _: (lambda: bn(conv(img)), lambda: ak.conv_bn2d(img, conv, bn)), (conv, bn))
        return [(m, o, k, _dispatch.select("conv_bn2d", img, training=m == "train")) for m, o, k in rows]
    if kernel == "linear_bn1d":
        n, fin, fout = SHAPES[shape]["rows"]
        a = x(n, fin)
        lin, bn = nn.Linear(fin, fout).to(**kw), nn.BatchNorm1d(fout).to(**kw)
        rows = both(lambda _: (lambda: bn(lin(a)), lambda: ak.linear_bn1d(a, lin, bn)), (lin, bn))
        return [(m, o, k, _dispatch.select("linear_bn1d", a, training=m == "train")) for m, o, k in rows]
    if kernel == "packed_qkv_linear":
        a = x(b, s, h)
        q, k_, v = (nn.Linear(h, h).to(**kw) for _ in range(3))
        rows = both(lambda _: (lambda: (q(a), k_(a), v(a)), lambda: ak.packed_qkv_linear(a, q, k_, v)), (q, k_, v))
        out = []
        for mode, o, k in rows:
            with torch.set_grad_enabled(mode == "train"):
                out.append((mode, o, k, _dispatch.select("packed_qkv_linear", a, training=mode == "train")))
        return out
    if kernel in ATTENTION_CLASSES:
        orig_mod, sdpa_mod, hidden, call_kw = attention_class_pair(kernel, b, s, h, heads, dtype, device)
        rows = both(lambda _: (lambda: orig_mod(hidden, **call_kw)[0], lambda: sdpa_mod(hidden, **call_kw)[0]),
                    (orig_mod, sdpa_mod))
        out = []
        for mode, o, k in rows:
            with torch.set_grad_enabled(mode == "train"):
                auto = _dispatch.select(kernel, hidden, training=mode == "train")
                # the subclass's own size test (CPU, bfloat16), which the decision cannot see
                pays = _class_sdpa_pays(kernel, hidden, heads, s)
            out.append((mode, o, k, auto if auto != "sdpa" or pays else "reference"))
        return out
    if kernel == "attention_core":
        # nanoGPT/ViT-style core on [B, H, S, D] with an additive padding mask (every row keeps keys), no dropout.
        q, k_, v = (x(b, heads, s, h // heads) for _ in range(3))
        mask = torch.zeros(b, 1, 1, s, **kw)
        mask[-1, ..., s - s // 4:] = torch.finfo(dtype).min
        scale = (h // heads) ** -0.5

        def eager() -> torch.Tensor:
            return F.softmax(q @ k_.transpose(-2, -1) * scale + mask, dim=-1) @ v

        rows = both(lambda _: (eager, lambda: ak.attention_core(q, k_.transpose(-2, -1), v, scale=scale, mask=mask)))
        out = []
        for mode, o, k in rows:
            with torch.set_grad_enabled(mode == "train"):
                auto = _dispatch.select("attention_core", q, training=mode == "train")
                # the kernel's own size test, which the decision cannot see
                pays = _sdpa_pays(q, k_.shape[-2], mode == "train")
            out.append((mode, o, k, auto if auto != "sdpa" or pays else "reference"))
        return out
    if kernel == "rms_norm":
        a = x(b, s, h)
        weight = torch.ones(h, **kw).requires_grad_()

        def llama() -> torch.Tensor:
            t = a.to(torch.float32)
            return weight * (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)).to(a.dtype)

        rows = both(lambda _: (llama, lambda: ak.rms_norm(a, weight, 1e-6, "llama")))
        return [(m, o, k, _dispatch.select("rms_norm", a, training=m == "train")) for m, o, k in rows]
    if kernel == "rms_norm_olmo2":  # the weight multiplies before the cast back: the Triton kernel's other branch
        a = x(b, s, h)
        weight = torch.ones(h, **kw).requires_grad_()

        def olmo2() -> torch.Tensor:
            t = a.to(torch.float32)
            return (weight * (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6))).to(a.dtype)

        rows = both(lambda _: (olmo2, lambda: ak.rms_norm(a, weight, 1e-6, "olmo2")))
        return [(m, o, k, _dispatch.select("rms_norm", a, training=m == "train")) for m, o, k in rows]
    if kernel == "gated_linear_unit":
        a = x(b, s, h)
        gate, up = nn.Linear(h, 4 * h, bias=False).to(**kw), nn.Linear(h, 4 * h, bias=False).to(**kw)
        rows = both(lambda _: (lambda: F.silu(gate(a)) * up(a), lambda: ak.gated_linear_unit(a, gate, up, F.silu)),
                    (gate, up))
        return [(m, o, k, _dispatch.select("gated_linear_unit", a, training=m == "train")) for m, o, k in rows]
    if kernel == "rotary_embedding":
        a = x(b, heads, s, h // heads)
        cos, sin = x(1, 1, s, h // heads, grad=False), x(1, 1, s, h // heads, grad=False)

        def rotate_half(t: torch.Tensor) -> torch.Tensor:
            return torch.cat((-t[..., t.shape[-1] // 2:], t[..., : t.shape[-1] // 2]), dim=-1)

        rows = both(lambda _: (lambda: (a * cos) + (rotate_half(a) * sin), lambda: ak.rotary_embedding(a, cos, sin)))
        return [(m, o, k, _dispatch.select("rotary_embedding", a, training=m == "train")) for m, o, k in rows]
    raise KeyError(kernel)


CPU_FAST = ("conv_bn2d=folded,linear_bn1d=folded,packed_qkv_linear=packed,bert_self_attention=sdpa,"
            "t5_attention=sdpa,gpt2_attention=sdpa,bart_attention=sdpa,attention_core=sdpa")
#: Elsewhere the Triton kernels run too (a bare name sets every kernel that has such a backend).
GPU_FAST = "triton," + CPU_FAST
KERNELS = ("softmax", "dropout_add_layer_norm", "linear_bias_activation", "conv_bn2d", "linear_bn1d",
           "packed_qkv_linear", *ATTENTION_CLASSES, "attention_core", "rms_norm",
           "rms_norm_olmo2", "gated_linear_unit", "rotary_embedding")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_pair(original: Fn, fused: Fn, device: torch.device, warmup: int, repeats: int,
              min_time: float) -> Tuple[List[float], List[float]]:
    """Per-call times of both, measured in alternating rounds; each sample averages enough calls to last
    ``min_time`` seconds (short ops are otherwise dominated by timer resolution)."""
    for _ in range(warmup):
        original()
        fused()
    _sync(device)
    start = time.perf_counter()
    original()
    _sync(device)
    calls = max(1, int(min_time / max(time.perf_counter() - start, 1e-7)))
    times: Tuple[List[float], List[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((original, times[0]), (fused, times[1])):
            _sync(device)
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            _sync(device)
            out.append((time.perf_counter() - start) / calls)
    return times


def _select_cost(device: torch.device, calls: int = 20000) -> float:
    """Seconds one ``select`` takes (the decision every kernel call makes before computing)."""
    probe = torch.zeros(4, device=device)
    samples = []
    for _ in range(9):
        start = time.perf_counter()
        for _ in range(calls):
            _dispatch.select("softmax", probe)
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def _quartiles(times: Sequence[float]) -> Tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(times, n=4) if len(times) > 1 else (times[0],) * 3
    return q1, statistics.median(times), q3


def _fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:9.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:9.1f} us"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--kernels", default=",".join(KERNELS), help=f"comma-separated subset of {','.join(KERNELS)}")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated torch dtypes")
    parser.add_argument("--shapes", default=None,
                        help=f"comma-separated subset of {','.join(SHAPES)} (default: small,base on CPU, all elsewhere)")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--repeats", type=int, default=15, help="timed samples per side (default 15)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--force", default=None,
                        help=f"ADOPTER_KERNELS_BACKEND spec the kernel side runs with (default on CPU: {CPU_FAST}; "
                        f"elsewhere: {GPU_FAST}); 'auto' times what the dispatch picks today")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: on a shared machine a descheduled second thread "
                        "stalls every parallel op for a scheduler slice)")
    parser.add_argument("--min-time", type=float, default=0.02, help="seconds per sample (default 0.02)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    if args.force is None:
        args.force = CPU_FAST if device.type == "cpu" else GPU_FAST
    if args.shapes is None:
        args.shapes = "small,base" if device.type == "cpu" else ",".join(SHAPES)
    modes = args.modes.split(",")
    load = os.getloadavg()
    print(f"# bench_kernels: torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
          f"kernel side forced to {args.force!r}, load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"# command: python benchmarks/bench_kernels.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"# median of {args.repeats} samples per side, alternating; spread = IQR / median; "
          "speedup = original / kernel; verdict needs non-overlapping IQRs")
    header = (f"{'kernel':24} {'dtype':9} {'shape':5} {'mode':5} {'auto':9} {'original':>12} {'spread':>6} "
              f"{'kernel':>12} {'spread':>6} {'speedup':>7}  verdict")
    print(header)
    print("-" * len(header))
    for kernel in args.kernels.split(","):
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            for shape in args.shapes.split(","):
                torch.manual_seed(0)
                try:
                    cases = build_cases(kernel, shape, dtype, device)
                except Exception as exc:  # e.g. an op without a kernel for this dtype on this device
                    print(f"{kernel:24} {dtype_name:9} {shape:5} skipped: {type(exc).__name__}: {exc}")
                    continue
                for mode, original, fused, backend in cases:
                    if mode not in modes:
                        continue
                    try:
                        with _dispatch.use_backend(args.force):
                            t_orig, t_fused = time_pair(original, fused, device, args.warmup, args.repeats,
                                                        args.min_time)
                    except Exception as exc:
                        print(f"{kernel:24} {dtype_name:9} {shape:5} {mode:5} failed: {type(exc).__name__}: {exc}")
                        continue
                    lo_o, med_o, hi_o = _quartiles(t_orig)
                    lo_f, med_f, hi_f = _quartiles(t_fused)
                    verdict = "faster" if hi_f < lo_o else "slower" if lo_f > hi_o else "same"
                    print(f"{kernel:24} {dtype_name:9} {shape:5} {mode:5} {backend:9} {_fmt_time(med_o):>12} "
                          f"{(hi_o - lo_o) / med_o:6.1%} {_fmt_time(med_f):>12} {(hi_f - lo_f) / med_f:6.1%} "
                          f"{med_o / med_f:7.2f}  {verdict}", flush=True)
    print(f"# dispatch decision (select) per kernel call: {_select_cost(device) * 1e6:.2f} us (median of 9 samples)")
    load = os.getloadavg()
    print(f"# load average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where SDPA starts to pay for an attention kernel: ADP010's ``attention_core`` (the hand-written core against the
kernel's SDPA path, its mask and probability checks included) or one of the SDPA subclasses of transformers' attention
classes (``--kernel``: the original class against its subclass), over a sweep of sequence lengths. A script, not a
test:

    python benchmarks/bench_attention_lengths.py                       # CPU, float32 inference, 16..256 keys
    python benchmarks/bench_attention_lengths.py --device cuda --lengths 128,256,512,768,1024,2048 --modes infer,train
    python benchmarks/bench_attention_lengths.py --form einsum         # vit-pytorch's torch.einsum products
    python benchmarks/bench_attention_lengths.py --kernel t5_attention --dtypes bfloat16 --batch 1
    python benchmarks/bench_attention_lengths.py --kernel bert_self_attention --autocast   # float32 layer, bf16 autocast
    python benchmarks/bench_attention_lengths.py --kernel bert_self_attention --autocast float16   # fp16 autocast
    python benchmarks/bench_attention_lengths.py --kernel bert_self_attention,gpt2_attention   # one table each

The subclass kernels (ADP001-ADP003, ADP014) run one attention layer of ``--heads`` x ``--head-dim`` on
``[batch, length, hidden]`` with the mask its model passes (bench_kernels.attention_class_pair: padding on the last
sample; T5 adds its relative position bias, GPT-2 its causal mask).

The core is nanoGPT's/ViT's on ``[batch, heads, length, head_dim]`` (query length = key length) with an additive
mask that keeps keys in every row (``--mask``: padding by default, a relative position bias, causal), no dropout. Both sides run in alternating rounds (bench_kernels.py's
``time_pair``); the speedup is the median of the per-round ratios original / kernel with their quartiles, and the
verdict reads ``faster``/``slower`` only when the interquartile range of the ratios excludes 1. The summary line
names the shortest measured length from which every longer one was ``faster``, and its number of attention scores
(batch x heads x length x length): what ``adopter_kernels.attention_core._MIN_SCORES`` holds per device, dtype and
mode, from the smallest such size across configurations (docs/KERNEL_PERFORMANCE.md, run E, records the runs); and,
over large batches of short rows (``--batch 1024 --heads 2 --lengths 16,25,32,49``), the shortest row that pays,
``_MIN_KEYS``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_kernels, beside this file
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
import adopter_kernels as ak  # noqa: E402
from adopter_kernels import _dispatch  # noqa: E402
from bench_kernels import ATTENTION_CLASSES, _infer, _quartiles, _train, attention_class_pair, time_pair  # noqa: E402


SCORES, OUTPUT = "b h i d, b h j d -> b h i j", "b h i j, b h j d -> b h i d"


def _ratios(device: torch.device, dtype: torch.dtype, mode: str, batch: int, heads: int, head_dim: int,
            length: int, warmup: int, repeats: int, min_time: float,
            form: str = "matmul", mask_kind: str = "padding",
            kernel_name: str = "attention_core",
            autocast: Optional[torch.dtype] = None) -> Tuple[float, float, List[float]]:
    """(original median seconds, kernel median seconds, per-round ratios original / kernel)."""
    torch.manual_seed(0)
    grad = mode == "train"
    if kernel_name != "attention_core":
        return _class_ratios(kernel_name, device, dtype, grad, batch, heads, head_dim, length, warmup, repeats,
                             min_time, autocast)
    q, k, v = (torch.randn(batch, heads, length, head_dim, device=device, dtype=dtype, requires_grad=grad)
               for _ in range(3))
    mask = _mask(mask_kind, batch, heads, length, device, dtype)
    scale = head_dim ** -0.5

    def original() -> torch.Tensor:
        if form == "einsum":
            return torch.einsum(OUTPUT, F.softmax(torch.einsum(SCORES, q, k) * scale + mask, dim=-1), v)
        return F.softmax(q @ k.transpose(-2, -1) * scale + mask, dim=-1) @ v

    def kernel() -> torch.Tensor:
        if form == "einsum":
            return ak.attention_core(q, k, v, scale=scale, mask=mask, score_equation=SCORES, output_equation=OUTPUT)
        return ak.attention_core(q, k.transpose(-2, -1), v, scale=scale, mask=mask)

    wrap = _train if grad else _infer
    with _dispatch.use_backend("attention_core=sdpa"):
        # the kernel side computes the same thing (to the rounding of the dtype: bfloat16 keeps 8 bits)
        tol = {} if dtype in (torch.float32, torch.float64) else {"rtol": 3e-2, "atol": 3e-2}
        torch.testing.assert_close(kernel(), original(), **tol)
        orig_t, kern_t = time_pair(wrap(original), wrap(kernel), device, warmup, repeats, min_time)
    return _summary(orig_t, kern_t)


def _class_ratios(kernel: str, device: torch.device, dtype: torch.dtype, grad: bool, batch: int, heads: int,
                  head_dim: int, length: int, warmup: int, repeats: int, min_time: float,
                  autocast: Optional[torch.dtype] = None) -> Tuple[float, float, List[float]]:
    """``_ratios`` for an SDPA subclass: one layer of the original class against the subclass with SDPA forced;
    ``autocast``: both called under autocast to that dtype."""
    original, sdpa, states, call_kw = attention_class_pair(kernel, batch, length, heads * head_dim, heads, dtype,
                                                           device)
    original.train(grad)
    sdpa.train(grad)
    if not grad:
        states = states.detach()
    wrap = _train if grad else _infer

    def call(module: torch.nn.Module) -> Callable[[], torch.Tensor]:
        def forward() -> torch.Tensor:
            with torch.autocast(device.type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
                return module(states, **call_kw)[0]
        return forward

    with _dispatch.use_backend(f"{kernel}=sdpa"):
        exact = dtype in (torch.float32, torch.float64) and autocast is None
        torch.testing.assert_close(call(sdpa)(), call(original)(), **({} if exact else {"rtol": 3e-2, "atol": 3e-2}))
        orig_t, kern_t = time_pair(wrap(call(original)), wrap(call(sdpa)), device, warmup, repeats, min_time)
    return _summary(orig_t, kern_t)


def _summary(orig_t: List[float], kern_t: List[float]) -> Tuple[float, float, List[float]]:
    return statistics.median(orig_t), statistics.median(kern_t), [o / k_ for o, k_ in zip(orig_t, kern_t)]


def _mask(kind: str, batch: int, heads: int, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask: ``padding`` [batch, 1, 1, keys] (the last sample pads a quarter of its keys: HF models),
    ``bias`` [heads, queries, keys] (a relative position bias: BEiT, MaxViT), ``causal`` [1, 1, queries, keys]."""
    if kind == "bias":
        return torch.randn(heads, length, length, device=device, dtype=dtype)
    if kind == "causal":
        upper = torch.ones(length, length, device=device, dtype=torch.bool).triu(1)
        return torch.zeros(1, 1, length, length, device=device, dtype=dtype).masked_fill(upper, torch.finfo(dtype).min)
    mask = torch.zeros(batch, 1, 1, length, device=device, dtype=dtype)
    mask[-1, ..., length - length // 4:] = torch.finfo(dtype).min
    return mask


def _sweep(kernel: str, args: argparse.Namespace, device: torch.device, lengths: List[int]) -> None:
    """One table: ``kernel`` against its original over ``lengths``, per dtype and mode, with the summary lines."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    what = (f"attention_core SDPA vs the hand-written {args.form} core on {device}, {args.mask} mask"
            if kernel == "attention_core" else f"{kernel} SDPA subclass vs its original class on {device}"
            + (f" under {args.autocast} autocast" if args.autocast else ""))
    print(f"# {what}, batch {args.batch}, {args.heads} heads, "
          f"head dim {args.head_dim}, {args.repeats} rounds, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), load average at start {load:.2f}")
    print(f"{'dtype':9} {'mode':5} {'keys':>5} {'original':>11} {'kernel':>11} {'speedup [q1-q3]':>20}  verdict")
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for mode in args.modes.split(","):
            verdicts = []
            for length in lengths:
                orig, kern, ratios = _ratios(device, dtype, mode, args.batch, args.heads, args.head_dim, length,
                                             args.warmup, args.repeats, args.min_time, args.form, args.mask,
                                             kernel, args.autocast and getattr(torch, args.autocast))
                q1, med, q3 = _quartiles(ratios)
                verdict = "faster" if q1 > 1 else "slower" if q3 < 1 else "same"
                verdicts.append(verdict)
                print(f"{dtype_name:9} {mode:5} {length:5d} {orig * 1e3:8.3f} ms {kern * 1e3:8.3f} ms "
                      f"{med:6.2f}x [{q1:.2f}-{q3:.2f}]  {verdict}", flush=True)
            pays = [n for i, n in enumerate(lengths) if all(v == "faster" for v in verdicts[i:])]
            if pays:
                scores = args.batch * args.heads * pays[0] * pays[0]
                print(f"# {dtype_name} {mode}: SDPA faster at every measured length from {pays[0]} keys on "
                      f"({args.batch}x{args.heads}x{pays[0]}x{pays[0]} = {scores} scores)")
            else:
                print(f"# {dtype_name} {mode}: SDPA not faster at the longest measured length")


def _kernel_list(text: str) -> List[str]:
    """``--kernel``'s comma-separated names, each one of the sweepable kernels."""
    kernels = [name.strip() for name in text.split(",") if name.strip()]
    known = ("attention_core", *ATTENTION_CLASSES)
    unknown = [name for name in kernels if name not in known]
    if unknown or not kernels:
        raise argparse.ArgumentTypeError(f"unknown kernel {', '.join(unknown) or repr(text)}: choose from "
                                         f"{', '.join(known)}")
    return kernels


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", type=_kernel_list, default=["attention_core"],
                        help="the kernel to sweep, or several, comma-separated, one table each (one process: on a GPU "
                        "the device is set up once): attention_core (default, ADP010), " + ", ".join(ATTENTION_CLASSES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", default="float32", help="comma-separated torch dtypes (default float32)")
    parser.add_argument("--modes", default="infer", help="comma-separated subset of infer,train (default infer)")
    parser.add_argument("--lengths", default="16,32,48,64,96,128,192,256", help="comma-separated key lengths")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=21, help="alternating rounds per length (default 21)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.02, help="seconds per sample (default 0.02)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as bench_kernels)")
    parser.add_argument("--form", choices=("matmul", "einsum"), default="matmul",
                        help="how the hand-written core writes its two products (default matmul: q @ k.transpose; "
                        "attention_core only)")
    parser.add_argument("--mask", choices=("padding", "bias", "causal"), default="padding",
                        help="the additive mask: padding [batch, 1, 1, keys] (default), a relative position bias "
                        "[heads, queries, keys], or causal [1, 1, queries, keys] (attention_core only: a class "
                        "kernel gets its model's mask)")
    parser.add_argument("--autocast", nargs="?", const="bfloat16", choices=("bfloat16", "float16"),
                        help="call both sides under torch.autocast(<device>, AUTOCAST) (bfloat16 when no dtype is "
                        "given), the layer and its input in --dtypes (float32: mixed precision, as gpu_bench --dtype "
                        "bf16); class kernels only (attention_core never takes SDPA under autocast)")
    args = parser.parse_args(argv)
    classes = [name for name in args.kernel if name != "attention_core"]
    if args.autocast and "attention_core" in args.kernel:
        parser.error("--autocast applies to the class kernels only (attention_core runs the original under autocast)")
    if classes and (args.form != "matmul" or args.mask != "padding"):
        parser.error(f"--form and --mask apply to attention_core only; {classes[0]} gets its model's mask")
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    lengths = [int(n) for n in args.lengths.split(",")]
    for kernel in args.kernel:
        _sweep(kernel, args, device, lengths)
    print(f"# load average at end {os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

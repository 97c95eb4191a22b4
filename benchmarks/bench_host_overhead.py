"""What a rewritten model costs the host over its original, per forward (and training step). A script, not a test:

    python benchmarks/bench_host_overhead.py                           # every suite model, fp32 + bf16, infer + train
    python benchmarks/bench_host_overhead.py --models bart,vit_einsum --dtypes bf16 --modes infer
    python benchmarks/bench_host_overhead.py --backend reference       # every kernel forced to the original computation

Where the dispatch runs the original computation, a rewritten model launches exactly the original's operators
(``tests/test_reference_runs_original_ops.py``), so on a GPU the only extra is the Python each kernel call runs on
its way there. That is invisible while the GPU sets the pace and is the whole difference where the host does: a
launch-bound model (small batches, bfloat16 inference on a fast GPU), whose time is the host's time to issue its
operators. This script measures that host time directly: each ``gpu_bench`` suite model at its tiny size, batch 2 and
8 tokens by default (next to no arithmetic, so a call's time is the Python and dispatch of its operators), vanilla
and every rewritten variant called in turn (a new random order every round), each call timed by the thread's CPU clock
(``time.thread_time_ns``: time the scheduler gives to other processes is not counted). Per variant it prints the
median vanilla and variant call, the median of the per-round differences with its quartiles, and the ratio
vanilla / variant (below 1: slower); ``same`` when the quartiles of the difference include zero. The row ``twin`` is
a second vanilla model timed the same way: an A/A control, whose figures are the comparison's noise floor.

The variants are ``gpu_bench``'s: one per applicable rule and ``all``, rewritten from each model's source, each
loading the vanilla weights with ``strict=True``. CPU autocast stands for CUDA's in ``bf16`` (the rewritten code
calls the same torch functions either way; the operators autocast picks differ between the devices).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
from adopter_kernels import use_backend  # noqa: E402
from gpu_bench.suite import SUITE, ModelSpec, SourceUnavailable, load_variants, synthetic_loss  # noqa: E402

Step = Callable[[], None]


def _autocast(dtype: str) -> contextlib.AbstractContextManager[Any]:
    return torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()


def _step(model: nn.Module, inputs: tuple[tuple[Any, ...], dict[str, Any]], mode: str, dtype: str) -> Step:
    args, kwargs = inputs

    def infer() -> None:
        with torch.inference_mode(), _autocast(dtype):
            model(*args, **kwargs)

    def train() -> None:
        with _autocast(dtype):
            output = model(*args, **kwargs)
        synthetic_loss(output).backward()
        model.zero_grad(set_to_none=True)

    model.train(mode == "train")
    return train if mode == "train" else infer


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4)
    return q1, median, q3


def measure(spec: ModelSpec, modes: Sequence[str], dtypes: Sequence[str], calls: int, warmup: int,
            batch_size: int, seq_len: int) -> list[str]:
    """Time vanilla against each variant of ``spec``; return one printed line per variant, mode and dtype."""
    variants = load_variants(spec, "host")
    vanilla_module = variants["vanilla"]
    # a second vanilla model: the A/A control, the noise floor of the comparison
    modules = {"vanilla": vanilla_module, "twin": vanilla_module, **variants}
    length = seq_len if spec.seq_len["tiny"] is not None else None
    torch.manual_seed(0)
    inputs = spec.inputs(vanilla_module, "tiny", batch_size, length)
    torch.manual_seed(0)
    state = spec.build(vanilla_module, "tiny", True).state_dict()
    models: dict[str, nn.Module] = {}
    for name, module in modules.items():
        torch.manual_seed(0)
        models[name] = spec.build(module, "tiny", True)
        models[name].load_state_dict(state, strict=True)
    lines = []
    for dtype in dtypes:
        for mode in modes:
            steps = {name: _step(model, inputs, mode, dtype) for name, model in models.items()}
            for _ in range(warmup):
                for step in steps.values():
                    step()
            times: dict[str, list[int]] = {name: [] for name in steps}
            order = list(steps)
            shuffle = random.Random(0).shuffle
            gc.collect()
            gc.disable()  # a collection would land in whichever call happens to trigger it
            try:
                for _ in range(calls):
                    # a new order every round: a model that ran just before is faster (warm caches), and a fixed
                    # order (even alternated) gives some models that advantage more often than others
                    shuffle(order)
                    for name in order:
                        start = time.thread_time_ns()
                        steps[name]()
                        times[name].append(time.thread_time_ns() - start)
            finally:
                gc.enable()
            base = statistics.median(times["vanilla"]) / 1e3
            for name in steps:
                if name == "vanilla":
                    continue
                diffs = [(v - b) / 1e3 for v, b in zip(times[name], times["vanilla"])]
                q1, extra, q3 = _quartiles(diffs)
                own = statistics.median(times[name]) / 1e3
                verdict = "same" if q1 <= 0.0 <= q3 else "slower" if q1 > 0 else "faster"
                lines.append(f"{spec.name:10s} {name:7s} {dtype:4s} {mode:5s} {base:9.1f} {own:9.1f} "
                             f"{extra:+8.1f} [{q1:+7.1f}, {q3:+7.1f}] {base / own:6.3f}  {verdict}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--models", default=",".join(SUITE), help="comma-separated gpu_bench suite models "
                        "(default: all)")
    parser.add_argument("--dtypes", default="fp32,bf16", help="fp32 and/or bf16 (CPU autocast); default: both")
    parser.add_argument("--modes", default="infer,train", help="infer and/or train; default: both")
    parser.add_argument("--backend", default="auto", help="ADOPTER_KERNELS_BACKEND for the run (default: auto)")
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per model and variant (default 1000)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls first (default 50)")
    parser.add_argument("--batch-size", type=int, default=2,
                        help="default 2 (the suite's tiny batch; BatchNorm cannot train on one sample)")
    parser.add_argument("--seq-len", type=int, default=8, help="tokens per sample of the text models (default 8)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; the suite has {', '.join(SUITE)}")
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    modes = [m.strip() for m in args.modes.split(",")]
    if not set(dtypes) <= {"fp32", "bf16"} or not set(modes) <= {"infer", "train"}:
        parser.error("--dtypes takes fp32,bf16 and --modes infer,train")
    if args.calls < 2 or args.warmup < 0:
        parser.error("--calls must be at least 2 (quartiles need two samples) and --warmup at least 0")
    try:
        with use_backend(args.backend):
            pass
    except ValueError as exc:
        parser.error(str(exc))
    torch.set_num_threads(1)  # one thread: the host cost of issuing operators, not intra-op parallelism
    print(f"# torch {torch.__version__}, one thread, backend {args.backend}, batch {args.batch_size}, "
          f"{args.seq_len} tokens, {args.calls} rounds of one call per model in random order "
          "(times: thread CPU time, us per call)")
    print(f"{'model':10s} {'variant':7s} {'type':4s} {'mode':5s} {'vanilla':>9s} {'variant':>9s} "
          f"{'extra':>8s} {'[q1, q3]':>18s} {'ratio':>6s}  verdict")
    with use_backend(args.backend):
        for name in names:
            try:
                lines = measure(SUITE[name], modes, dtypes, args.calls, args.warmup, args.batch_size, args.seq_len)
            except SourceUnavailable as exc:
                print(f"{name:10s} skipped: {exc}")
                continue
            except Exception as exc:  # one model that cannot run at these settings must not stop the others
                print(f"{name:10s} failed: {type(exc).__name__}: {exc}")
                continue
            print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

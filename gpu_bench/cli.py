"""Command line of ``python -m gpu_bench``."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from gpu_bench.report import SCHEMA_VERSION, environment, write_outputs
from gpu_bench.runner import AUTOCAST, DTYPES, TOLERANCES, BenchConfig, run_suite
from gpu_bench.suite import SIZES, SUITE, max_seq_len
from gpu_bench.variants import Rewriter, default_rewriter

EPILOG = """\
models: {models}

examples:
  python -m gpu_bench --size tiny --device cpu --no-compile            # CPU smoke: pipeline + equivalence
  python -m gpu_bench --size base --device cuda --dtype bf16 --out gpu_bench/results/h100-base-bf16
  python -m gpu_bench --models bert,gpt2 --rules ADP001,ADP005 --repeats 20

exit status: 0 all variants equivalent and timed; 1 some variant not equivalent or failed; 2 usage error
or the codemod core is unavailable.
"""


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_bench",
        description=(
            "Benchmark vanilla models against the same models rewritten by adopter_codemods: one variant per\n"
            "applicable rule plus all rules, rewritten from each model's source. Every variant loads the vanilla\n"
            "state_dict with strict=True and is checked for equivalence (outputs and gradients, eval and train)\n"
            "before training steps and inference are timed. Writes results.json, results.md and results.png."
        ),
        epilog=EPILOG.format(models=", ".join(f"{name} ({spec.title})" for name, spec in SUITE.items())),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size", choices=SIZES, default="tiny",
                        help="model sizes: tiny (CPU smoke) or base (published base checkpoints' shapes); "
                        "default: tiny")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda when available, else cpu")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32",
                        help="fp32; bf16 autocast (fp32 weights, mixed-precision training); fp16, float16 "
                        "weights and inputs (model.half(), half-precision inference; its training steps plain AdamW "
                        "in float16); or amp-fp16, float16 autocast over fp32 weights with a gradient scaler "
                        "(mixed precision on GPUs without bfloat16); default: fp32")
    parser.add_argument("--models", type=_csv, default=list(SUITE),
                        help=f"comma-separated subset of the suite; default: all ({','.join(SUITE)})")
    parser.add_argument("--rules", type=_csv, default=None,
                        help="comma-separated rule codes or codemod names to try (e.g. ADP005,FuseConvBN); "
                        "default: all rules. Which of them apply to a model is found by rewriting it")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also time torch.compile of vanilla and of the all-rules variant; "
                        "default: on for cuda, off for cpu")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory; default: gpu_bench/results/tmp/<size>-<device>-<dtype>")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per measurement (default: 10, tiny: 3)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed calls before timing, at least 1 (default: 3, tiny: 1)")
    parser.add_argument("--batch-size", type=int, default=None, help="override every model's batch size")
    parser.add_argument("--seq-len", type=int, default=None,
                        help="override the sequence length of text models (at most the learned positions of those "
                             "that have them: vilt 40 at base)")
    parser.add_argument("--interleave", action="store_true",
                        help="time each variant call by call in alternation with vanilla and report the median of "
                             "the per-call speedups with its quartiles: robust to a changing machine load (shared "
                             "CPUs); holds two models at once; peak memory is not measured")
    parser.add_argument("--modes", type=_csv, default=["train", "inference"],
                        help="comma-separated subset of train,inference to time (default both; inference alone "
                        "where training steps are too slow to repeat, as fp16 on CPU)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights, inputs, dropout and cotangents")
    parser.add_argument("--no-equivalence", dest="equivalence", action="store_false",
                        help="skip the equivalence check (timing only)")
    parser.add_argument("--rtol", type=float, default=None,
                        help="equivalence rtol; default per dtype: "
                        + ", ".join(f"{d} {r:g}" for d, (r, _) in TOLERANCES.items()))
    parser.add_argument("--atol", type=float, default=None,
                        help="equivalence atol; default per dtype: "
                        + ", ".join(f"{d} {a:g}" for d, (_, a) in TOLERANCES.items()))
    return parser


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> BenchConfig:
    """Validate the arguments and resolve the defaults that depend on size and device."""
    unknown = [name for name in args.models if name not in SUITE]
    if unknown or not args.models:
        parser.error(f"unknown model(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SUITE)}")
    device_name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_name == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda, but torch {torch.__version__} sees no CUDA device")
    tiny = args.size == "tiny"
    warmup = args.warmup if args.warmup is not None else (1 if tiny else 3)
    repeats = args.repeats if args.repeats is not None else (3 if tiny else 10)
    if warmup < 1 or repeats < 1:
        parser.error("--warmup and --repeats must be at least 1")
    for option in ("batch_size", "seq_len"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be positive")
    if not args.modes or set(args.modes) - {"train", "inference"}:
        parser.error(f"--modes takes train and/or inference, not {','.join(args.modes) or '(none)'}")
    if args.seq_len is not None:
        # Checked here, not after minutes of other models: a longer input fails in the model's embedding.
        too_long = [f"{name} ({limit})" for name in args.models
                    if (limit := max_seq_len(name, args.size)) is not None and args.seq_len > limit]
        if too_long:
            parser.error(f"--seq-len {args.seq_len} is more than these models' learned positions at --size "
                         f"{args.size}: {', '.join(too_long)}; run them separately, with a --seq-len they take")
    return BenchConfig(
        size=args.size,
        device=torch.device(device_name),
        dtype=args.dtype,
        models=args.models,
        rules=args.rules,
        compile=args.compile if args.compile is not None else device_name == "cuda",
        warmup=warmup,
        repeats=repeats,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        seed=args.seed,
        equivalence=args.equivalence,
        rtol=args.rtol,
        atol=args.atol,
        interleave=args.interleave,
        modes=tuple(mode for mode in ("train", "inference") if mode in args.modes),
    )


_START = time.perf_counter()


def _log(message: str) -> None:
    """Progress line on stderr, stamped with seconds since start (stdout stays free for other tools)."""
    print(f"[{time.perf_counter() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def _memory_method(models: list[dict[str, Any]]) -> str | None:
    for model in models:
        for variant in model["variants"]:
            if "train" in variant:
                return variant["train"]["memory_method"]
    return None


def main(argv: Sequence[str] | None = None, *, rewrite: Rewriter | None = None) -> int:
    """Run the benchmark; ``rewrite`` replaces ``adopter_codemods.api.rewrite_source`` (tests inject one)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    config = config_from_args(args, parser)
    if rewrite is None:
        try:
            rewrite = default_rewriter()
        except ImportError as exc:
            print(f"gpu_bench: {exc}", file=sys.stderr)
            return 2
    if config.rules is not None:
        try:  # unknown rule names: fail once here rather than once per model
            rewrite("", config.rules, path="<rule check>")
        except KeyError as exc:
            parser.error(str(exc.args[0]) if exc.args else str(exc))
    out = args.out or Path("gpu_bench/results/tmp") / f"{config.size}-{config.device.type}-{config.dtype}"

    _log(f"gpu_bench: {len(config.models)} model(s), size {config.size}, {config.dtype} on {config.device}, "
         f"compile {'on' if config.compile else 'off'}, output {out}")
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rtol, atol = config.tolerances
    env = environment(config.device)  # once: it asks git and the devices

    def payload(models: list[dict[str, Any]]) -> dict[str, Any]:
        done = {model["name"] for model in models}
        return {
            "schema": SCHEMA_VERSION,
            "command": shlex.join(["python", "-m", "gpu_bench", *argv]),
            "environment": {
                **env,
                "load_average": [load_start, os.getloadavg()[0]] if load_start is not None else None,
            },
            "settings": {
                "size": config.size, "device": str(config.device), "dtype": config.dtype,
                "autocast": config.dtype in AUTOCAST, "models": list(config.models), "rules": config.rules,
                "compile": config.compile, "warmup": config.warmup, "repeats": config.repeats, "seed": config.seed,
                "equivalence": config.equivalence, "rtol": rtol, "atol": atol, "interleave": config.interleave,
                "modes": list(config.modes),
                "memory_method": _memory_method(models),
                "loss": "sum over outputs requiring grad of mean(output.float()**2)", "optimizer": "AdamW(lr=1e-5)",
            },
            # Models not run yet: non-empty only in the files written after each model, which an interrupted
            # run (a time limit, Ctrl-C) leaves behind.
            "pending": [name for name in config.models if name not in done],
            "models": models,
        }

    def save_progress(models: list[dict[str, Any]]) -> None:
        if len(models) < len(config.models):
            write_outputs(out, payload(models))

    models = run_suite(config, rewrite, _log, on_model=save_progress)
    for path in write_outputs(out, payload(models)):
        _log(f"wrote {path}")

    failed = [
        f"{model['name']}/{variant['name']}"
        for model in models
        for variant in model["variants"]
        if variant.get("error") or (variant.get("equivalence") and not variant["equivalence"]["ok"])
    ] + [model["name"] for model in models if model.get("error")]
    if failed:
        _log(f"not equivalent or failed: {', '.join(failed)}")
        return 1
    return 0

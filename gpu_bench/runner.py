"""Run the suite: rewrite each model's source, check every variant against vanilla, then time them all."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from adopter_kernels.equivalence import compare_models, load_source_as_module
from gpu_bench.suite import SUITE, Inputs, ModelSpec, SourceUnavailable, synthetic_loss
from gpu_bench.timing import Timing, measure, measure_paired, paired_speedup
from gpu_bench.variants import Rewriter, make_variants

#: Equivalence tolerances per benchmark dtype (rtol, atol), applied to outputs, gradients and buffers.
#: fp32: different but exact kernels (SDPA vs eager softmax, folded BN) differ by float rounding only.
#: bf16 autocast: both sides round to bf16 (8 bits of mantissa, eps 7.8e-3) at different points. fp16 (float16
#: weights): 11 bits (eps 9.8e-4), rounded at different points through a dozen layers. amp-fp16 (float16 autocast)
#: as bf16: T5-base's original parameter gradients under it were 1.9% of the largest gradient from float64's, and
#: its SDPA rewrite's as far (gpu_bench/results/cpu-2026-11-28/amp_fp16_t5_gradient_error.txt).
TOLERANCES: dict[str, tuple[float, float]] = {"fp32": (1e-4, 1e-5), "bf16": (5e-2, 5e-2), "fp16": (2e-2, 2e-2),
                                              "amp-fp16": (5e-2, 5e-2)}
#: The benchmark dtypes: fp32; bf16 autocast over float32 weights (mixed-precision training); fp16, float16 weights
#: and float inputs (``model.half()``, as half-precision inference runs; its training steps are plain AdamW in float16);
#: amp-fp16, float16 autocast over float32 weights with a gradient scaler (classic mixed-precision training, as on
#: GPUs without bfloat16).
DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16", "amp-fp16")
#: The autocast dtype of the dtypes that run under autocast.
AUTOCAST: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "amp-fp16": torch.float16}


@dataclasses.dataclass
class BenchConfig:
    """Everything that determines one run (the CLI's arguments, resolved)."""

    size: str
    device: torch.device
    dtype: str
    models: Sequence[str]
    rules: Sequence[str] | None = None
    compile: bool = False
    warmup: int = 3
    repeats: int = 10
    batch_size: int | None = None
    seq_len: int | None = None
    seed: int = 0
    equivalence: bool = True
    rtol: float | None = None
    atol: float | None = None
    interleave: bool = False
    modes: Sequence[str] = ("train", "inference")

    @property
    def tolerances(self) -> tuple[float, float]:
        rtol, atol = TOLERANCES[self.dtype]
        return (self.rtol if self.rtol is not None else rtol, self.atol if self.atol is not None else atol)


Log = Callable[[str], None]


def _autocast(config: BenchConfig) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """Forward-pass context: bf16 or float16 autocast (weights stay fp32, as in mixed-precision training) or
    nothing."""
    dtype = AUTOCAST.get(config.dtype)
    if dtype is not None:
        return lambda: torch.autocast(config.device.type, dtype=dtype)
    return contextlib.nullcontext


@contextlib.contextmanager
def _strict_fp32(device: torch.device) -> Iterator[None]:
    """Disable TF32 for the equivalence check, so fp32 means fp32 (cuDNN convolutions use TF32 by default)."""
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _to_device(value: Any, device: torch.device, half: bool = False) -> Any:
    """``value``'s tensors on ``device``; with ``half``, its floating tensors in float16 too (ids stay integers)."""
    if isinstance(value, torch.Tensor):
        return value.to(device, torch.float16) if half and value.is_floating_point() else value.to(device)
    if isinstance(value, dict):
        return {key: _to_device(item, device, half) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(item, device, half) for item in value)
    return value


def _place(model: nn.Module, config: BenchConfig) -> nn.Module:
    """The model on the run's device, in float16 for ``fp16`` (autocast keeps bf16 runs' weights in float32)."""
    return model.to(config.device, torch.float16) if config.dtype == "fp16" else model.to(config.device)


def _seeded(seed: int, fn: Callable[[], Any]) -> Any:
    """Call ``fn`` with the global RNG seeded, leaving the caller's RNG state untouched."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return fn()


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _steps(model: nn.Module, inputs: Inputs, config: BenchConfig) -> dict[str, Callable[[], None]]:
    """The timed calls per mode: inference (eval, ``inference_mode``) and a training step (forward, backward,
    AdamW step; amp-fp16 scales the loss and unscales the step, as float16 mixed precision trains). Each sets the
    model's mode itself, so two models can be timed in alternation."""
    args, kwargs = inputs
    autocast = _autocast(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    scaler = torch.amp.GradScaler(config.device.type, enabled=config.dtype == "amp-fp16")

    def infer() -> None:
        model.eval()
        with torch.inference_mode(), autocast():
            model(*args, **kwargs)

    def train_step() -> None:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            output = model(*args, **kwargs)
        scaler.scale(synthetic_loss(output)).backward()
        scaler.step(optimizer)
        scaler.update()

    return {"inference": infer, "train": train_step}


def time_model(model: nn.Module, inputs: Inputs, config: BenchConfig, batch_size: int) -> dict[str, Timing]:
    """Time inference, then a training step (those of ``config.modes``)."""
    settings = dict(device=config.device, batch_size=batch_size, warmup=config.warmup, repeats=config.repeats)
    steps = _steps(model, inputs, config)
    return {mode: measure(steps[mode], **settings) for mode in ("inference", "train") if mode in config.modes}


def time_pair(
    vanilla: nn.Module, variant: nn.Module, inputs: Inputs, config: BenchConfig, batch_size: int
) -> dict[str, tuple[Timing, Timing]]:
    """Time vanilla and a variant in alternation, call by call (``measure_paired``), inference then training."""
    settings = dict(device=config.device, batch_size=batch_size, warmup=config.warmup, repeats=config.repeats)
    ours, theirs = _steps(vanilla, inputs, config), _steps(variant, inputs, config)
    return {mode: measure_paired((ours[mode], theirs[mode]), **settings) for mode in ("inference", "train")
            if mode in config.modes}


def _check(
    spec: ModelSpec,
    config: BenchConfig,
    reference: nn.Module,
    module: types.ModuleType,
    inputs: Inputs,
) -> dict[str, Any]:
    """Equivalence of one variant against the vanilla ``reference`` (dropout off, both modes)."""
    rtol, atol = config.tolerances
    candidate = _place(_seeded(config.seed, lambda: spec.build(module, config.size, False)), config)
    with _strict_fp32(config.device):
        report = compare_models(
            reference, candidate, *inputs, rtol=rtol, atol=atol, seed=config.seed, context=_autocast(config)
        )
    return {
        "ok": report.ok,
        "rtol": rtol,
        "atol": atol,
        "tensors_compared": report.compared,
        "max_abs_diff": report.max_abs_diff,
        "mismatches": [str(m) for m in report.mismatches[:20]],
        "mismatch_count": len(report.mismatches),
    }


def run_model(spec: ModelSpec, config: BenchConfig, rewrite: Rewriter, log: Log) -> dict[str, Any]:
    """Benchmark one suite entry; failures of single variants are recorded in the result, not raised."""
    batch_size = config.batch_size or spec.batch_size[config.size]
    seq_len = (config.seq_len or spec.seq_len[config.size]) if spec.seq_len[config.size] is not None else None
    result: dict[str, Any] = {"name": spec.name, "title": spec.title, "module": spec.module,
                              "batch_size": batch_size, "seq_len": seq_len, "variants": []}
    path = spec.source_path()
    source = path.read_text()
    result["source"] = str(path)

    start = time.perf_counter()
    variants = make_variants(source, str(path), rewrite, config.rules)
    result["rewrite_s"] = time.perf_counter() - start
    result["findings"] = {code: max(v.findings.get(code, 0) for v in variants)
                          for code in sorted({code for v in variants for code in v.findings})}
    found = ", ".join(f"{code}x{n}" for code, n in result["findings"].items()) or "none"
    log(f"[{spec.name}] rewrite: {len(variants) - 1} variant(s); findings: {found} ({result['rewrite_s']:.1f}s)")

    entries: dict[str, dict[str, Any]] = {}
    modules: dict[str, types.ModuleType] = {}
    for variant in variants:
        entries[variant.name] = {"name": variant.name, "rules": list(variant.rules), "compiled": False,
                                 "findings": variant.findings, "rule_names": variant.rule_names,
                                 "equivalence": None}
        try:
            modules[variant.name] = load_source_as_module(
                variant.source,
                f"{spec.module}__{variant.name.lower()}",
                package=spec.package,
                # Distinct names keep each variant's text in linecache (tracebacks show the executed code).
                path=str(path) if variant.name == "vanilla" else f"{path}[{variant.name}]",
            )
        except Exception as exc:  # e.g. the rewritten code imports a kernel that does not exist
            if variant.name == "vanilla":
                raise
            entries[variant.name]["error"] = f"loading the rewritten source failed: {_error(exc)}"
            log(f"[{spec.name}/{variant.name}] {entries[variant.name]['error']}")
    variants = [v for v in variants if v.name in modules]
    vanilla_module = modules["vanilla"]
    inputs: Inputs = _to_device(
        _seeded(config.seed, lambda: spec.inputs(vanilla_module, config.size, batch_size, seq_len)), config.device,
        config.dtype == "fp16",
    )

    if config.equivalence and len(variants) > 1:
        reference = _place(_seeded(config.seed, lambda: spec.build(vanilla_module, config.size, False)), config)
        for variant in variants[1:]:
            entry = entries[variant.name]
            try:
                entry["equivalence"] = _check(spec, config, reference, modules[variant.name], inputs)
            except Exception as exc:  # a broken variant must not stop the other variants
                entry["equivalence"] = {"ok": False, "mismatches": [_error(exc)], "mismatch_count": 1}
                log(traceback.format_exc())
            eq = entry["equivalence"]
            diff = max(eq.get("max_abs_diff", {}).values(), default=float("nan"))
            status = "ok" if eq["ok"] else "FAILED: " + "; ".join(eq["mismatches"][:3])
            log(f"[{spec.name}/{variant.name}] equivalence {status} (max abs diff {diff:.2e})")
        del reference
        _free(config.device)

    # Timing models keep their dropout; every variant starts from the vanilla weights (strict load).
    vanilla = _seeded(config.seed, lambda: spec.build(vanilla_module, config.size, True))
    result["params"] = sum(p.numel() for p in vanilla.parameters())
    vanilla_state = {k: v.detach().clone() for k, v in vanilla.state_dict().items()}
    del vanilla
    runs = [(variant, False) for variant in variants]
    if config.compile:
        runs += [(variants[0], True)] + ([(variants[-1], True)] if len(variants) > 1 else [])
    for variant, compiled in runs:
        name = f"{variant.name}+compile" if compiled else variant.name
        # Compiled anchors are timed only; their eager variant carries the equivalence result.
        entry = entries.setdefault(name, {**entries[variant.name], "name": name, "compiled": True, "equivalence": None})
        # Interleaved, eager vanilla is paired with a vanilla twin too: an A/A control whose ratio shows any bias
        # of the pairing itself (1.00 when it is fair).
        reference = modules["vanilla"] if config.interleave else None
        entry.update(_timed(spec, config, modules[variant.name], vanilla_state, inputs, batch_size, compiled, log,
                            f"{spec.name}/{name}", reference))
        _free(config.device)
    result["variants"] = list(entries.values())
    return result


def _build(spec: ModelSpec, config: BenchConfig, module: types.ModuleType, state: dict[str, torch.Tensor]) -> nn.Module:
    model = _seeded(config.seed, lambda: spec.build(module, config.size, True))
    model.load_state_dict(state, strict=True)
    return _place(model, config)


def _timed(
    spec: ModelSpec,
    config: BenchConfig,
    module: types.ModuleType,
    state: dict[str, torch.Tensor],
    inputs: Inputs,
    batch_size: int,
    compiled: bool,
    log: Log,
    label: str,
    reference: types.ModuleType | None = None,
) -> dict[str, Any]:
    """Build, load the vanilla weights with ``strict=True``, optionally compile, and time one variant: alone, or
    (``reference`` given: ``--interleave``) in alternation with an eager model built from ``reference`` and the same
    weights, whose per-call ratios give the speedup; peak memory is then not measured (both models share the
    process: the peak could not be attributed to either)."""
    try:
        model = _build(spec, config, module, state)
        runnable = torch.compile(model) if compiled else model
        if reference is None:
            timings = time_model(runnable, inputs, config, batch_size)
            paired = None
        else:
            vanilla = _build(spec, config, reference, state)
            pairs = time_pair(vanilla, runnable, inputs, config, batch_size)
            del vanilla
            _free(config.device)
            timings = {mode: pair[1] for mode, pair in pairs.items()}
            paired = {mode: {**paired_speedup(*pair), "vanilla_samples_per_s": pair[0].samples_per_s}
                      for mode, pair in pairs.items()}
    except Exception as exc:  # record and go on with the next variant
        log(f"[{label}] FAILED: {_error(exc)}\n{traceback.format_exc()}")
        return {"error": _error(exc)}
    finally:
        if compiled:
            torch._dynamo.reset()  # drop compiled graphs (and their memory) before the next variant
    summary: dict[str, Any] = {mode: timing.summary() for mode, timing in timings.items()}
    modes = [mode for mode in ("train", "inference") if mode in timings]
    if paired is not None:
        summary["paired"] = paired
        log(f"[{label}] speedup vs interleaved vanilla: " + ", ".join(
            f"{mode} {paired[mode]['median']:.3f}x [{paired[mode]['q1']:.3f}, {paired[mode]['q3']:.3f}]"
            for mode in modes))
    log(f"[{label}] " + ", ".join(f"{mode} {summary[mode]['samples_per_s']:.1f} samples/s" for mode in modes))
    return summary


def run_suite(
    config: BenchConfig,
    rewrite: Rewriter,
    log: Log,
    on_model: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every selected model; one whose source is unavailable is skipped, one that fails is recorded.
    ``on_model`` gets the results so far after each model (the CLI writes them, so an interrupted run keeps them)."""
    results: list[dict[str, Any]] = []
    for name in config.models:
        spec = SUITE[name]
        try:
            results.append(run_model(spec, config, rewrite, log))
        except SourceUnavailable as exc:
            log(f"[{name}] skipped: {exc}")
            results.append({"name": name, "title": spec.title, "skipped": str(exc), "variants": []})
        except Exception as exc:  # e.g. the rewriter crashed on this source: report it, run the other models
            log(f"[{name}] FAILED: {_error(exc)}\n{traceback.format_exc()}")
            results.append({"name": name, "title": spec.title, "error": _error(exc), "variants": []})
        _free(config.device)
        if on_model is not None:
            on_model(results)
    return results

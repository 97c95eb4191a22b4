"""Outputs of a run: ``results.json`` (every figure + environment), ``results.md`` (table), ``results.png`` (chart).

Speedup = samples/s of the variant / samples/s of eager vanilla, measured in the same run. Memory ratio = peak
memory of the variant / peak memory of eager vanilla (same measurement method; below 1 is better).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

SCHEMA_VERSION = 1
MODES: tuple[str, ...] = ("train", "inference")


def environment(device: torch.device) -> dict[str, Any]:
    """Software and hardware the figures were measured on."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "device": str(device),
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            gpu=props.name,
            gpu_memory_bytes=props.total_memory,
            gpu_capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            # Timing runs keep PyTorch's defaults; the equivalence check turns TF32 off.
            tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
            tf32_cudnn=torch.backends.cudnn.allow_tf32,
        )
    env["git_commit"] = _git_commit()
    return env


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    """Commit of the checkout gpu_bench runs from, with ``-dirty`` when the working tree has changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit or None


def add_ratios(models: Sequence[dict[str, Any]]) -> None:
    """Add ``speedup`` and ``memory_ratio`` per mode to every variant, relative to eager vanilla."""
    for model in models:
        base = next((v for v in model["variants"] if v["name"] == "vanilla"), None)
        for variant in model["variants"]:
            variant["speedup"], variant["memory_ratio"] = {}, {}
            for mode in MODES:
                ours, theirs = variant.get(mode), (base or {}).get(mode)
                if not ours or not theirs:
                    continue
                paired = variant.get("paired", {}).get(mode)
                if paired is not None:  # --interleave: the median per-call ratio against its own vanilla twin
                    variant["speedup"][mode] = paired["median"]
                    variant.setdefault("beyond_noise", {})[mode] = paired["beyond_noise"]
                else:
                    variant["speedup"][mode] = ours["samples_per_s"] / theirs["samples_per_s"]
                    # A difference counts as measured when the interquartile ranges of the times do not overlap.
                    distinct = ours["q3_s"] < theirs["q1_s"] or ours["q1_s"] > theirs["q3_s"]
                    variant.setdefault("beyond_noise", {})[mode] = distinct
                if ours["peak_mem_bytes"] and theirs["peak_mem_bytes"]:
                    variant["memory_ratio"][mode] = ours["peak_mem_bytes"] / theirs["peak_mem_bytes"]


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f}"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _equivalence_cell(variant: dict[str, Any]) -> str:
    eq = variant.get("equivalence")
    if eq is None:
        return "-"
    if eq["ok"]:
        diff = max(eq.get("max_abs_diff", {}).values(), default=0.0)
        return f"ok ({diff:.0e})"
    return f"**FAIL** ({eq.get('mismatch_count', '?')})"


def markdown(payload: dict[str, Any]) -> str:
    """One table row per model and variant, then the failures and skipped models."""
    env, settings = payload["environment"], payload["settings"]
    hardware = env.get("gpu") or env.get("cpu")
    lines = [
        f"# gpu_bench: {settings['size']} models, {settings['dtype']} on {settings['device']} ({hardware})",
        "",
        f"Command: `{payload['command']}`",
        "",
        f"torch {env['torch']}, transformers {env.get('transformers') or '-'}, python {env['python']}, "
        f"commit {env.get('git_commit') or '-'}. Median of {settings['repeats']} timed calls after "
        f"{settings['warmup']} warm-up calls; spread = interquartile range / median. Speedup and memory ratio are "
        f"relative to eager vanilla in the same run. Memory: {settings.get('memory_method') or '-'}. "
        f"Equivalence: outputs, input and parameter gradients and buffers in eval and train mode "
        f"(dropout off), rtol={settings['rtol']:g}, atol={settings['atol']:g}; the cell shows the max abs diff. "
        + ("Interleaved timing: each variant ran call by call in alternation with a vanilla twin; its speedup is "
           "the median of the per-call ratios, `~` when their interquartile range includes 1 (within noise). "
           "Vanilla's own row is the A/A control (vanilla against its twin: 1.00 when the pairing is fair). "
           if settings.get("interleave") else
           "`~` after a speedup: the interquartile ranges of variant and vanilla overlap (within noise).")
        + (f" 1-minute load average at start {env['load_average'][0]:.2f}, at end {env['load_average'][1]:.2f} "
           f"(per measurement in results.json)." if env.get("load_average") else ""),
        "",
        "| model | variant | equivalence | train samples/s | spread | speedup | peak MiB | mem ratio "
        "| infer samples/s | spread | speedup | peak MiB | mem ratio |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    notes = []
    for model in payload["models"]:
        label = model["name"]
        if model.get("skipped") or model.get("error"):
            notes.append(f"- {label}: {'skipped' if model.get('skipped') else 'failed'}: "
                         f"{model.get('skipped') or model.get('error')}")
            continue
        if len(model["variants"]) < 2 or all(v["name"].startswith("vanilla") for v in model["variants"]):
            notes.append(f"- {label}: no selected rule applies to this model's source (vanilla timed only)")
        shape = f"b={model['batch_size']}" + (f", s={model['seq_len']}" if model.get("seq_len") else "")
        for variant in model["variants"]:
            cells = [f"{label} ({shape})", _variant_label(variant), _equivalence_cell(variant)]
            for mode in MODES:
                figures = variant.get(mode)
                if not figures:
                    cells += ["-"] * 5
                    continue
                cells += [
                    f"{figures['samples_per_s']:,.1f}",
                    f"{figures['iqr_rel']:.1%}",
                    _fmt(variant["speedup"].get(mode), ".2f") + "x" + _ratio_range(variant, mode)
                    + _noise_mark(variant, mode),
                    _mib(figures["peak_mem_bytes"]),
                    _fmt(variant["memory_ratio"].get(mode), ".2f"),
                ]
            lines.append("| " + " | ".join(cells) + " |")
            if variant.get("error"):
                notes.append(f"- {label}/{variant['name']}: {variant['error']}")
            eq = variant.get("equivalence")
            if eq and not eq["ok"]:
                notes += [f"- {label}/{variant['name']} not equivalent: {m}" for m in eq["mismatches"][:5]]
    if payload.get("pending"):
        notes.append(f"- **incomplete run**: stopped before {', '.join(payload['pending'])}")
    if notes:
        lines += ["", "## Notes and problems", "", *notes]
    return "\n".join(lines) + "\n"


def _ratio_range(variant: dict[str, Any], mode: str) -> str:
    paired = variant.get("paired", {}).get(mode)
    return "" if paired is None else f" [{paired['q1']:.2f}-{paired['q3']:.2f}]"


def _noise_mark(variant: dict[str, Any], mode: str) -> str:
    if (variant["name"] == "vanilla" and "paired" not in variant) or variant.get("beyond_noise", {}).get(mode, True):
        return ""
    return " ~"


def _variant_label(variant: dict[str, Any]) -> str:
    names = variant.get("rule_names") or {}
    if variant["name"] in names:  # a single-rule variant: "ADP005 FuseDropoutLN x12"
        code = variant["name"]
        label = f"{code} {names[code]} x{variant['findings'].get(code, 0)}"
    else:
        label = variant["name"]
    return label + (" + torch.compile" if variant["compiled"] and "+compile" not in label else "")


def chart(payload: dict[str, Any], path: Path) -> str | None:
    """Speedup and memory ratio per model and variant as grouped bars; returns a message if skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart (pip install matplotlib)"

    rows = [
        (f"{m['name']}/{v['name']}", v)
        for m in payload["models"]
        for v in m["variants"]
        if v["name"] != "vanilla" and v.get("speedup")
    ]
    if not rows:
        return "nothing to chart: no timed variant besides vanilla"
    figure, axes = plt.subplots(2, 1, figsize=(max(8.0, 0.45 * len(rows) + 3), 8), sharex=True)
    positions = range(len(rows))
    width = 0.38
    for axis, key, title in (
        (axes[0], "speedup", "speedup vs eager vanilla (higher is better)"),
        (axes[1], "memory_ratio", "peak memory vs eager vanilla (lower is better)"),
    ):
        for offset, mode in ((-width / 2, "train"), (width / 2, "inference")):
            values = [v[key].get(mode, float("nan")) for _, v in rows]
            axis.bar([p + offset for p in positions], values, width, label=mode)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_yscale("log")  # ratios: 2x and 0.5x equally far from 1, outliers do not squash the rest
        axis.set_title(title)
        axis.legend()
    axes[1].set_xticks(list(positions), [label for label, _ in rows], rotation=60, ha="right", fontsize=8)
    settings = payload["settings"]
    figure.suptitle(f"gpu_bench {settings['size']} {settings['dtype']} on "
                    f"{payload['environment'].get('gpu') or settings['device']}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return None


def write_outputs(out: Path, payload: dict[str, Any]) -> list[Path]:
    """Write JSON, Markdown and (when matplotlib is available) PNG; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    add_ratios(payload["models"])
    written = [out / "results.json", out / "results.md"]
    write_json(written[0], payload)
    written[1].write_text(markdown(payload))
    message = chart(payload, out / "results.png")
    if message:
        print(f"gpu_bench: {message}", file=sys.stderr)
    else:
        written.append(out / "results.png")
    return written

"""``benchmarks/bench_kernels.py`` builds and runs every case: each kernel, dtype and mode at the small shape, once.

A smoke test of the script (a benchmark prints figures; nothing here looks at them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_kernels.py"


def _load(name: str = "bench_kernels") -> Any:
    """``benchmarks/<name>.py`` as a module (a script, not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPT.parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("args", [["--shapes", "small"], ["--shapes", "tiny", "--force", "reference"]],
                         ids=["small", "tiny-reference"])
def test_every_kernel_dtype_and_mode_runs(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    bench = _load()
    threads = torch.get_num_threads()
    try:
        assert bench.main([*args, "--repeats", "1", "--warmup", "1", "--min-time", "0"]) == 0
    finally:
        torch.set_num_threads(threads)  # the script pins one thread for itself
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line and not line.startswith(("#", "-"))]
    body = rows[1:]  # below the header
    assert not [row for row in body if "failed:" in row or "skipped:" in row], body
    seen = {(row[0], row[1], row[3]) for row in body}
    expected = {(kernel, dtype, mode) for kernel in bench.KERNELS for dtype in ("float32", "bfloat16")
                for mode in ("infer", "train")}
    assert seen == expected


@pytest.mark.parametrize(
    ("kernel", "extra"),
    [("attention_core", []), ("attention_core", ["--form", "einsum"]), ("bert_self_attention", []),
     ("t5_attention", []), ("gpt2_attention", []), ("bart_attention", []), ("gpt2_attention", ["--autocast"]),
     ("bert_self_attention", ["--autocast", "float16"])],
)
def test_attention_length_sweep_runs(kernel: str, extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``benchmarks/bench_attention_lengths.py``: one row per dtype, mode and length, and its summary line; for
    ADP010's core and for each SDPA subclass (its equivalence assert runs on every length), under autocast to the
    dtype named (bfloat16 by default)."""
    import torch

    sweep = _load("bench_attention_lengths")
    threads = torch.get_num_threads()
    try:
        argv = ["--lengths", "16,32", "--modes", "infer,train", "--repeats", "1", "--warmup", "1", "--min-time", "0",
                "--batch", "1", "--heads", "2", "--head-dim", "8", "--kernel", kernel, *extra]
        assert sweep.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"# {kernel} SDPA")
    if "--autocast" in extra:
        assert f"under {(extra[1:] or ['bfloat16'])[0]} autocast" in lines[0]
    rows = [line.split()[:3] for line in lines if line.startswith("float32")]
    assert rows == [["float32", mode, n] for mode in ("infer", "train") for n in ("16", "32")]
    assert sum("SDPA" in line for line in lines if line.startswith("# float32")) == 2


def test_attention_length_sweep_takes_several_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    """``--kernel a,b``: one table per kernel, in the order given, from one process; an unknown name is a usage
    error that names it."""
    import torch

    sweep = _load("bench_attention_lengths")
    threads = torch.get_num_threads()
    try:
        argv = ["--lengths", "16", "--repeats", "1", "--warmup", "1", "--min-time", "0", "--batch", "1", "--heads",
                "2", "--head-dim", "8", "--kernel", "gpt2_attention,bart_attention", "--autocast"]
        assert sweep.main(argv) == 0
        with pytest.raises(SystemExit):
            sweep.main(["--kernel", "gpt2_attention,bert_attention"])
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    headers = [line.split()[1] for line in out.splitlines() if "SDPA subclass vs" in line]
    assert headers == ["gpt2_attention", "bart_attention"]
    assert sum(line.startswith("float32   infer    16") for line in out.splitlines()) == 2
    assert "unknown kernel bert_attention" in err

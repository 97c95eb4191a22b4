"""``benchmarks/bench_kernels.py`` builds and runs every case: each kernel, dtype and mode at the small shape, once.

A smoke test of the script (a benchmark prints figures; nothing here looks at them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_kernels.py"


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_kernels", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_kernels"] = module
    spec.loader.exec_module(module)
    return module


def test_every_kernel_dtype_and_mode_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    bench = _load()
    threads = torch.get_num_threads()
    try:
        assert bench.main(["--shapes", "small", "--repeats", "1", "--warmup", "1", "--min-time", "0"]) == 0
    finally:
        torch.set_num_threads(threads)  # the script pins one thread for itself
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line and not line.startswith(("#", "-"))]
    body = rows[1:]  # below the header
    assert not [row for row in body if "failed:" in row or "skipped:" in row], body
    seen = {(row[0], row[1], row[3]) for row in body}
    expected = {(kernel, dtype, mode) for kernel in bench.KERNELS for dtype in ("float32", "bfloat16")
                for mode in ("infer", "train")}
    assert seen == expected


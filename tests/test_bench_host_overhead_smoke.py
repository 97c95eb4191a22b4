"""``benchmarks/bench_host_overhead.py`` runs: one row per variant (the A/A twin included), dtype and mode.

Never speed: the figures are whatever the machine gives."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_host_overhead.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_host_overhead", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_per_variant_dtype_and_mode(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        assert bench.main(["--models", "vit_einsum", "--calls", "3", "--warmup", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("vit_einsum")]
    assert not [row for row in rows if row[1] in ("failed:", "skipped:")], rows
    assert {(row[1], row[2], row[3]) for row in rows} == {
        (variant, dtype, mode)
        for variant in ("twin", "ADP006", "ADP010", "all")
        for dtype in ("fp32", "bf16")
        for mode in ("infer", "train")
    }
    assert all(row[-1] in ("same", "slower", "faster") for row in rows)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "nope"], "unknown model(s) nope"),
        (["--calls", "1"], "--calls must be at least 2"),
        (["--backend", "fastest"], "ADOPTER_KERNELS_BACKEND must be one of"),
    ],
)
def test_bad_arguments_are_usage_errors(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err

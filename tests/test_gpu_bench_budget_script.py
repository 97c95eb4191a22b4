"""``gpu_bench/run_gpu_budget.sh``: its steps, their order and the budget that skips them (a stand-in python)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "gpu_bench" / "run_gpu_budget.sh"

pytestmark = pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils' timeout")


def _run(tmp_path: Path, budget: int) -> list[str]:
    """Run the script with a python that answers the device query and records every other call."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\n'
        f'echo "$*" >> {calls}\n'
    )
    fake.chmod(0o755)
    results = tmp_path / "results"
    env = {**os.environ, "PYTHON": str(fake), "BUDGET": str(budget), "DEVICE": "cpu", "SIZE": "tiny",
           "RESULTS": str(results)}
    subprocess.run(["sh", str(SCRIPT)], cwd=ROOT, env=env, check=True, capture_output=True, timeout=60)
    assert (results / "commands.txt").is_file()
    return calls.read_text().splitlines() if calls.exists() else []


def test_steps_run_in_order_of_value(tmp_path: Path) -> None:
    calls = _run(tmp_path, budget=600)
    assert [call.split()[0:3] for call in calls] == [
        ["-m", "pytest", "tests/kernels"],
        ["benchmarks/bench_kernels.py", "--device", "cpu"],
        ["benchmarks/bench_attention_lengths.py", "--device", "cpu"],
        ["benchmarks/bench_attention_lengths.py", "--device", "cpu"],
        ["-m", "gpu_bench", "--size"],
        ["-m", "gpu_bench", "--size"],
        ["-m", "gpu_bench", "--size"],
    ]
    assert "--form" not in calls[2] and calls[3].endswith("--form einsum")
    assert "--dtype fp32 --no-compile" in calls[4] and "--dtype bf16 --no-compile --interleave" in calls[5]
    assert "--dtype bf16 --compile --models bert,gpt2,nanogpt,resnet" in calls[6]
    log = (tmp_path / "results" / "commands.txt").read_text()
    assert log.count("# exit 0 at") == 7


def test_a_spent_budget_skips_the_steps(tmp_path: Path) -> None:
    assert _run(tmp_path, budget=10) == []
    log = (tmp_path / "results" / "commands.txt").read_text()
    assert log.count("# skipped, budget spent:") == 7

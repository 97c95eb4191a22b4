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


def _run(tmp_path: Path, budget: int, **extra: str) -> list[str]:
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
           "RESULTS": str(results), **extra}
    for name in ("STEPS", "MODELS", "BF16_MODELS", "FP32_MODELS", "FP16_MODELS", "AMP16_MODELS"):
        if name not in extra:
            env.pop(name, None)
    subprocess.run(["sh", str(SCRIPT)], cwd=ROOT, env=env, check=True, capture_output=True, timeout=60)
    assert (results / "commands.txt").is_file()
    return calls.read_text().splitlines() if calls.exists() else []


def test_steps_run_what_no_gpu_measured_first(tmp_path: Path) -> None:
    calls = _run(tmp_path, budget=600)
    sweep = "benchmarks/bench_attention_lengths.py"
    assert [call.split()[0:3] for call in calls] == [
        ["-m", "pytest", "tests/kernels"],
        [sweep, "--device", "cpu"],
        [sweep, "--device", "cpu"],
        [sweep, "--device", "cpu"],
        ["-m", "gpu_bench", "--size"],
        ["-m", "gpu_bench", "--size"],
        ["-m", "gpu_bench", "--size"],
        ["-m", "gpu_bench", "--size"],
        ["-m", "gpu_bench", "--size"],
        ["-m", "gpu_bench", "--size"],
        ["benchmarks/bench_kernels.py", "--device", "cpu"],
        [sweep, "--device", "cpu"],
        [sweep, "--device", "cpu"],
        [sweep, "--device", "cpu"],
    ]
    classes = "--kernel bert_self_attention,t5_attention,gpt2_attention,bart_attention"
    assert calls[1].endswith(classes) and "--autocast" not in calls[1]
    assert "--autocast" in calls[2] and calls[2].endswith(classes)
    assert "--mask bias" in calls[3]
    assert "--dtype bf16 --no-compile --interleave" in calls[4] and "--models bart,vit_einsum,t5," in calls[4]
    assert "--dtype fp32 --no-compile" in calls[5] and "--models t5,gpt_neo,smollm," in calls[5]
    assert "--dtype fp16 --no-compile --modes inference --interleave" in calls[6]
    assert "--dtype amp-fp16 --no-compile --interleave" in calls[7] and "--modes" not in calls[7]
    assert "--dtype bf16 --compile --models gpt2,bart,vit_einsum" in calls[8]
    assert "--dtype fp32 --compile --models bert,gpt2,nanogpt" in calls[9]
    assert "--form" not in calls[11] and calls[12].endswith("--form einsum") and "--batch 1024" in calls[13]
    log = (tmp_path / "results" / "commands.txt").read_text()
    assert log.count("# exit 0 at") == 14


def test_steps_and_models_can_be_chosen(tmp_path: Path) -> None:
    calls = _run(tmp_path, budget=600, STEPS="base-fp32 kernel-tests bogus", MODELS="bert,gpt2")
    assert [call.split()[0:2] for call in calls] == [["-m", "gpu_bench"], ["-m", "pytest"]]
    assert "--models bert,gpt2 " in calls[0]
    log = (tmp_path / "results" / "commands.txt").read_text()
    assert "# unknown step bogus" in log


def test_a_spent_budget_skips_the_steps(tmp_path: Path) -> None:
    assert _run(tmp_path, budget=10) == []
    log = (tmp_path / "results" / "commands.txt").read_text()
    assert log.count("# skipped, budget spent:") == 14

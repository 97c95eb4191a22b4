"""ADP011 FuseRMSNorm, ADP012 FuseGatedMLP and ADP013 FuseRotaryEmbedding on real LLaMA-family models.

transformers 4.34.1 (the suite's pinned version, in process): LLaMA and Mistral. The newest transformers 4.x
(4.57.6, in a subprocess whose PYTHONPATH puts ``.cache/transformers-4.57.6`` first; ``make test`` installs it there
with ``make newest-transformers``): LLaMA, Mistral and Qwen2. Each file is rewritten with the three rules, the
findings per class are checked, and a tiny float64 model built from the rewritten source loads the original's
checkpoint strictly and computes the same outputs and gradients in eval and training (``tests/llm_blocks_real.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
NEWEST = "4.57.6"
NEWEST_DIR = ROOT / ".cache" / f"transformers-{NEWEST}"

# Every model: three RMSNorms (two per decoder layer class, one final), one gated MLP, q and k rotated.
EXPECTED = {
    model: {
        f"ADP011:{prefix}DecoderLayer": 2,
        f"ADP011:{prefix}Model": 1,
        f"ADP012:{prefix}MLP": 1,
        "ADP013:": 2,  # "": the module-level apply_rotary_pos_emb
    }
    for model, prefix in (("llama", "Llama"), ("mistral", "Mistral"), ("qwen2", "Qwen2"))
}


@pytest.mark.skipif(transformers.__version__ != "4.34.1", reason="written against transformers 4.34.1")
@pytest.mark.parametrize("model", ["llama", "mistral"])
def test_llm_blocks_on_transformers_4_34_1(model: str) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from llm_blocks_real import check_model
    finally:
        sys.path.remove(str(ROOT / "tests"))
    assert check_model(model) == EXPECTED[model]


@pytest.mark.skipif(
    not (NEWEST_DIR / "transformers").is_dir(),
    reason=f"transformers {NEWEST} is not installed under {NEWEST_DIR} (run `make newest-transformers`)",
)
def test_llm_blocks_on_newest_transformers_4x() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_CACHE"}
    env["PYTHONPATH"] = os.pathsep.join([str(NEWEST_DIR), str(ROOT)])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "llm_blocks_real.py"), "llama", "mistral", "qwen2"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["transformers"] for r in results] == [NEWEST] * 3
    assert {r["model"]: r["findings"] for r in results} == {m: EXPECTED[m] for m in ("llama", "mistral", "qwen2")}

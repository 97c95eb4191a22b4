"""The codemod path needs only libcst + fixit (docs/DESIGN.md §1): no torch or transformers import anywhere on it,
also where class discovery reads torch's own sources (adopter_codemods/class_bases.py)."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

PROBE = """
import sys
import adopter_codemods, adopter_codemods.cli, adopter_codemods.lint
from adopter_codemods import AdoptAll, FuseDropoutLN
from adopter_codemods.api import rewrite_source, scan_source
from adopter_codemods.engine import rewrite_module
source = open(sys.argv[1], encoding="utf-8").read()
assert rewrite_source(source, path=sys.argv[1]).findings and scan_source(source, path=sys.argv[1])
from adopter_codemods.class_bases import BaseResolver  # reads torch's sources to find that Embedding is a Module
assert BaseResolver(sys.argv[1]).base_is_module("torch.nn.Embedding")[0]
heavy = sorted(m for m in ("torch", "transformers", "triton", "adopter_kernels") if m in sys.modules)
print(",".join(heavy) or "none")
"""


def test_rewriting_imports_no_torch() -> None:
    example = ROOT / "adopter_codemods" / "examples" / "bert_like.py"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(example)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "none"

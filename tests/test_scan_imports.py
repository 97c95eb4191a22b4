"""`scan --no-cache` in one process imports nothing it does not use (benchmarks/bench_cli.py counts process start):
no process pool, hashing, temporary files, diffs or URL quoting, and no torch."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

PROBE = """
import sys
import pathlib  # the CLI's paths; on Python <= 3.12 it imports urllib.parse itself
before = set(sys.modules)  # what the interpreter's start-up (site, .pth files) and pathlib imported is not ours
from adopter_codemods.cli import main
assert main(["scan", "--no-cache", "--no-progress", sys.argv[1]]) == 1  # findings
unused = ("multiprocessing", "hashlib", "tempfile", "difflib", "urllib.parse", "torch", "fixit")
print(",".join(m for m in unused if m in sys.modules and m not in before) or "none")
"""


def test_scan_imports_only_what_it_uses() -> None:
    example = ROOT / "adopter_codemods" / "examples" / "bert_like.py"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(example)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "none"

"""The packages type-check: mypy, configured in pyproject.toml (``[tool.mypy]``: every function of adopter_codemods
annotated, the bodies of both packages checked), reports no error. Part of the suite so that ``make test`` fails on
a type error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT


def test_mypy_reports_no_error() -> None:
    pytest.importorskip("mypy", reason="mypy (the test extra) needs Python >= 3.10")
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout

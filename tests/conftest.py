"""Shared test helpers: fixture discovery and running a rule on a fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def fixture_cases() -> list[Path]:
    """Every input file under fixtures/<CODE>_<name>/ (expected outputs excluded)."""
    return sorted(
        p for p in FIXTURES.glob("ADP*_*/*.py") if not p.name.endswith(".expected.py")
    )


def rule_code(case: Path) -> str:
    return case.parent.name.split("_", 1)[0]


def expected_path(case: Path) -> Path:
    return case.with_name(case.stem + ".expected.py")


def is_negative(case: Path) -> bool:
    return case.name.startswith("neg_")


@pytest.fixture(autouse=True)
def _deterministic_torch_threads() -> None:
    """Keep CPU runs deterministic and light on the 2-core CI machine."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a test dependency
        return
    torch.set_num_threads(1)

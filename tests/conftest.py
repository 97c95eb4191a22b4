"""Shared test helpers: fixture discovery and running a rule on a fixture."""

from __future__ import annotations

from collections.abc import Iterator
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
def _deterministic_torch() -> Iterator[None]:
    """Every test starts from the same torch state, whatever ran before it (test order must not matter).

    One thread keeps CPU runs deterministic and light on the 2-core CI machine; the seed makes whatever a test
    draws without seeding it itself the same in every run; a test that changes the default dtype without
    restoring it fails here instead of silently changing the precision of the tests after it.
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a test dependency
        yield
        return
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    leaked = torch.get_default_dtype()
    if leaked != torch.float32:
        torch.set_default_dtype(torch.float32)
        pytest.fail(f"the test left torch's default dtype at {leaked}")


@pytest.fixture
def float64() -> Iterator[None]:
    """Build and compare models in float64 (``equivalence.default_dtype``): rounding noise ~1e-15, not ~1e-7."""
    import torch

    from adopter_kernels.equivalence import default_dtype

    with default_dtype(torch.float64):
        yield

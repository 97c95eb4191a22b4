"""Golden fixtures for every rule: exact expected output, idempotence, no-op on negatives, and execution.

Each positive case is imported as written and as rewritten; `make_example()` builds the model in both, the
original state_dict loads strictly into the rewritten model, and outputs/gradients/buffers are compared in eval
and training (adopter_kernels.equivalence).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from adopter_codemods.api import rewrite_source
from conftest import FIXTURES, expected_path, fixture_cases, is_negative, rule_code

CASES = fixture_cases()
IDS = [f"{c.parent.name}/{c.name}" for c in CASES]


def _rewrite(case: Path) -> tuple[str, str, int]:
    source = case.read_text(encoding="utf-8")
    result = rewrite_source(source, [rule_code(case)], path=str(case))
    return source, result.code, len(result.findings)


def test_every_rule_directory_has_cases() -> None:
    dirs = sorted(p for p in FIXTURES.iterdir() if p.is_dir())
    assert dirs, "no fixtures"
    for d in dirs:
        cases = [c for c in CASES if c.parent == d]
        assert any(not is_negative(c) for c in cases), f"{d.name}: no positive case"
        assert any(is_negative(c) for c in cases), f"{d.name}: no negative case"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_golden_output(case: Path) -> None:
    source, code, findings = _rewrite(case)
    if is_negative(case):
        assert findings == 0, "negative case must not match"
        assert code == source, "negative case must stay byte-identical"
        assert not expected_path(case).exists(), "negative cases have no .expected.py"
        return
    assert findings >= 1
    expected = expected_path(case)
    assert expected.exists(), f"missing {expected.name}; rewritten output:\n{code}"
    assert code == expected.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_idempotent(case: Path) -> None:
    _, code, _ = _rewrite(case)
    again = rewrite_source(code, [rule_code(case)])
    assert again.code == code
    assert not again.findings


POSITIVE = [c for c in CASES if not is_negative(c)]


@functools.cache
def _fast_paths_on_cpu() -> str:
    """An ``ADOPTER_KERNELS_BACKEND`` value forcing, for every kernel, the backend other than the original computation
    that runs on CPU (SDPA, the packed GEMM, folded BatchNorm); Triton (interpreted only) and xformers (CUDA) aside."""
    import adopter_kernels

    forced = []
    for kernel, info in adopter_kernels.backends().items():
        names = [b["name"] for b in info["backends"] if b["available"] and b["name"] not in ("reference", "triton")]
        if names:
            forced.append(f"{kernel}={names[0]}")
    return ",".join(forced)


@pytest.mark.parametrize("dispatch", ["auto", "fast"])
@pytest.mark.parametrize("case", POSITIVE, ids=[f"{c.parent.name}/{c.name}" for c in POSITIVE])
def test_rewrite_is_equivalent(case: Path, dispatch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the dispatch a user gets on this machine (`auto`: at these sizes on CPU mostly the original computation),
    and with every fast path that runs on CPU forced (`fast`)."""
    pytest.importorskip("torch")
    # Packages next to a case (ADP007's adp007_layers/) import as the engine resolved them: from its directory.
    monkeypatch.syspath_prepend(str(case.parent))
    from adopter_kernels import BACKEND_ENV
    from adopter_kernels.equivalence import assert_equivalent, load_source_as_module

    if dispatch == "fast":
        monkeypatch.setenv(BACKEND_ENV, _fast_paths_on_cpu())

    source = case.read_text(encoding="utf-8")
    expected = expected_path(case).read_text(encoding="utf-8")
    stem = f"fixture_{case.parent.name}_{case.stem}"
    original = load_source_as_module(source, stem + "_original", path=str(case))
    rewritten = load_source_as_module(expected, stem + "_rewritten", path=str(expected_path(case)))
    tolerance = getattr(original, "EQUIVALENCE_TOLERANCE", {})  # e.g. BatchNorm folding in eval
    assert_equivalent(original, rewritten, **tolerance)

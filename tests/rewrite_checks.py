"""Assertions shared by the engine tests: a source is either left byte-identical, or rewritten into code that
parses, is idempotent, and is executed-equivalent to the original (adopter_kernels.equivalence)."""

from __future__ import annotations

import itertools
from typing import Optional, Sequence

import libcst as cst

from adopter_codemods.api import RewriteResult, rewrite_source

_ids = itertools.count()


def assert_unchanged(source: str, rules: Optional[Sequence[str]] = None) -> None:
    result = rewrite_source(source, rules)
    assert not result.findings, [f.message for f in result.findings]
    assert result.code == source


def assert_equivalent_rewrite(
    source: str, rules: Optional[Sequence[str]] = None, *, findings: Optional[int] = None
) -> RewriteResult:
    """Rewrite `source`, then check the output parses, a second run is a no-op, and `make_example()` builds models
    that load the original state_dict strictly and compute the same outputs and gradients in eval and train."""
    from adopter_kernels.equivalence import assert_equivalent, load_source_as_module

    result = rewrite_source(source, rules)
    assert result.findings, "expected a rewrite"
    if findings is not None:
        assert len(result.findings) == findings, [f.message for f in result.findings]
    cst.parse_module(result.code)
    again = rewrite_source(result.code, rules)
    assert again.code == result.code and not again.findings, "a second run changed the code"
    n = next(_ids)
    original = load_source_as_module(source, f"adopter_check_{n}_original")
    rewritten = load_source_as_module(result.code, f"adopter_check_{n}_rewritten")
    assert_equivalent(original, rewritten)
    return result

"""Produce the rewritten variants of one model source with the codemod core.

Which rules apply is *discovered*: the source is rewritten once with every selected rule, and the rule codes of
the findings are the applicable rules. Then each applicable rule is applied alone (one variant per rule), and,
when more than one applies, all of them together (variant ``all``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol


class Finding(Protocol):
    code: str
    rule: str


class RewriteResultLike(Protocol):
    code: str
    changed: bool

    @property
    def findings(self) -> Sequence[Any]: ...


#: ``rewrite(source, rules, path=...)``, the signature of ``adopter_codemods.api.rewrite_source``.
Rewriter = Callable[..., RewriteResultLike]


@dataclasses.dataclass(frozen=True)
class Variant:
    """One version of a model's source: ``vanilla``, a rule code such as ``ADP005``, or ``all``."""

    name: str
    rules: tuple[str, ...]
    source: str
    #: Number of rewrite sites per rule code in this variant.
    findings: dict[str, int]
    #: Codemod names per code, e.g. ``{"ADP005": "FuseDropoutLN"}``.
    rule_names: dict[str, str]


def default_rewriter() -> Rewriter:
    """``adopter_codemods.api.rewrite_source``; raises ``ImportError`` with a hint when the core is missing."""
    try:
        from adopter_codemods.api import rewrite_source
    except ImportError as exc:
        raise ImportError(
            "gpu_bench needs the codemod core (adopter_codemods.api.rewrite_source); "
            f"it could not be imported: {exc}"
        ) from exc
    return rewrite_source


def _count(findings: Iterable[Any]) -> tuple[dict[str, int], dict[str, str]]:
    counts = Counter(f.code for f in findings)
    names = {f.code: f.rule for f in findings}
    return dict(sorted(counts.items())), dict(sorted(names.items()))


def make_variants(
    source: str,
    path: str,
    rewrite: Rewriter,
    rules: Sequence[str] | None = None,
) -> list[Variant]:
    """Return ``[vanilla, <one per applicable rule>..., all]`` for ``source`` (``all`` only if it differs).

    ``rules`` restricts the rules tried (codes or codemod names, as ``rewrite_source`` accepts); ``None`` tries
    every built-in rule, those whose kernels run the original computation by default too (``all``), so that the
    tables show each rule is no slower. A rule that has findings in the combined run but changes nothing when applied
    alone is skipped.
    """
    variants = [Variant("vanilla", (), source, {}, {})]
    combined = rewrite(source, list(rules) if rules is not None else ["all"], path=path)
    counts, names = _count(combined.findings)
    if not combined.changed or not counts:
        return variants
    for code in counts:
        single = rewrite(source, [code], path=path)
        if single.changed:
            single_counts, single_names = _count(single.findings)
            variants.append(Variant(code, (code,), single.code, single_counts, single_names))
    if all(v.source != combined.code for v in variants):  # e.g. one applicable rule: "all" is that variant
        variants.append(Variant("all", tuple(counts), combined.code, counts, names))
    return variants

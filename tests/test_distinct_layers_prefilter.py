"""Where refusals are not listed, ADP009 does not walk a class binding fewer Linears than its pattern calls
(matcher._binds_distinct_layers): every structural match there reuses a layer, which `qkv_distinct_layers`
refuses. With ``--show-refused`` the class is walked and the refusal listed as before."""

from __future__ import annotations

from adopter_codemods.engine import analyse_source
from adopter_codemods.rules import select_rules

ONE_LINEAR_THRICE = """\
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        q = self.proj(x)
        k = self.proj(x)
        v = self.proj(x)
        return q + k + v
"""

THREE_LINEARS = ONE_LINEAR_THRICE.replace(
    "self.proj = nn.Linear(d, d)", "self.q = nn.Linear(d, d)\n        self.k = nn.Linear(d, d)\n        self.v = nn.Linear(d, d)"
).replace("q = self.proj(x)", "q = self.q(x)").replace("k = self.proj(x)", "k = self.k(x)").replace(
    "v = self.proj(x)", "v = self.v(x)"
)


def _walked(source: str, with_refusals: bool) -> tuple[bool, list[str]]:
    analysis = analyse_source(source, select_rules(["ADP009"]), with_refusals=with_refusals)
    (cls,) = analysis.structure.classes
    reasons = [r.reason for r in analysis.refused()] if with_refusals else []
    return cls._graphs is not None, reasons


def test_one_linear_class_is_not_walked_without_refusals() -> None:
    walked, _ = _walked(ONE_LINEAR_THRICE, with_refusals=False)
    assert not walked


def test_its_refusal_is_still_listed() -> None:
    walked, reasons = _walked(ONE_LINEAR_THRICE, with_refusals=True)
    assert walked
    assert any("one layer stands for two of the projections" in r for r in reasons), reasons


def test_three_linears_are_found() -> None:
    analysis = analyse_source(THREE_LINEARS, select_rules(["ADP009"]))
    assert [f.code for f in analysis.findings()] == ["ADP009"]

"""A fused call reads its inputs at another statement than the code it replaces: code in between that changes such
an input in place through another name, a view, a container or the tensor it is a view of is refused
(adopter_codemods/flow/aliasing.py; the refused forms: the two `neg_input_changed_through_alias.py` fixtures).
Code in between that only reads such a value, or changes something that holds no part of it, leaves the rewrite
in place, executed-equivalent to the original."""

from __future__ import annotations

import libcst as cst
import pytest

pytest.importorskip("torch")

from adopter_codemods.api import refused_sites  # noqa: E402
from adopter_codemods.provider.syntax import in_place_targets  # noqa: E402
from rewrite_checks import assert_equivalent_rewrite  # noqa: E402

_DROPOUT_NORM = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(d)

    def forward(self, x, r):
        x = x * 2
{between}
        return self.norm(y + r){extra}


def make_example():
    return Block(6), (torch.randn(2, 3, 6), torch.randn(2, 3, 6))
'''


def _dropout_norm(between: str, extra: str = "") -> str:
    lines = "\n".join("        " + line for line in between.strip().splitlines())
    return _DROPOUT_NORM.format(between=lines, extra=extra)


@pytest.mark.parametrize(
    "between, extra",
    [
        # a number read off the tensor, then augmented: no tensor changes
        ("n = x.shape[-1]\ny = self.dropout(x)\nn += 1", " * n"),
        # a view of the input, read only
        ("flat = x.view(-1)\ny = self.dropout(x)\nfirst = flat[0]", " + first"),
        # the input stored into a fresh dict: the dict changes, the tensor does not
        ("seen = {}\ny = self.dropout(x)\nseen['x'] = x", " + seen['x'].mean()"),
        # a new tensor changed in place, then added to the residual: a sum holds neither with the input
        ("other = torch.zeros_like(r)\ny = self.dropout(x)\nother += 1\nr = r + other", ""),
    ],
    ids=["number-augmented", "view-read", "stored-into-dict", "other-tensor-augmented"],
)
def test_harmless_code_between_keeps_the_rewrite(between: str, extra: str) -> None:
    assert_equivalent_rewrite(_dropout_norm(between, extra), ["ADP005"], findings=1)


def test_change_through_an_alias_is_refused_with_its_line() -> None:
    source = _dropout_norm("flat = x.view(-1)\ny = self.dropout(x)\nflat.mul_(3)")
    [site] = refused_sites(source, ["ADP005"])
    assert site.category == "input-may-be-mutated"
    assert "may share memory with `x`" in site.reason
    assert site.cause_line == source.splitlines().index("        flat.mul_(3)") + 1


def test_change_through_another_parameter_is_refused() -> None:
    """The caller may pass the residual as a view of the input (or the same tensor): a change of one in place
    may change the other, which the fused call would read after it."""
    source = _dropout_norm("y = self.dropout(x)\nr.mul_(3)").replace("        x = x * 2\n", "")
    [site] = refused_sites(source, ["ADP005"])
    assert site.category == "input-may-be-mutated"
    assert site.cause_line == source.splitlines().index("        r.mul_(3)") + 1


@pytest.mark.parametrize(
    "between",
    [
        "flat = x.view(-1)\ny = self.dropout(x)\nif x.dim() > 1:\n    flat[0] = 0.0",
        "flat = x.view(-1)\ny = self.dropout(x)\nfor t in [flat]:\n    t += 1",
        "y = self.dropout(x)\nfor t in [x, r]:\n    t.mul_(2)",
        "flat = x.view(-1)\ny = self.dropout(x)\nwhile flat[0] > 0:\n    flat.sub_(1)",
    ],
    ids=["store-under-if", "loop-variable-augmented", "loop-variable-in-place-method", "in-place-method-in-while"],
)
def test_change_inside_a_compound_statement_is_refused(between: str) -> None:
    [site] = refused_sites(_dropout_norm(between), ["ADP005"])
    assert site.category == "input-may-be-mutated", site.reason


_PROJECTIONS = '''
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
'''

_LOOP_BETWEEN_PROJECTIONS = _PROJECTIONS + '''        self.scale = nn.Linear(d, d)

    def forward(self, h):
        h = h * 2
        held = [h]
        q = self.q(h)
        for t in held:
            t += self.scale(t)
        k = self.k(h)
        v = self.v(h)
        return q, k, v
'''


def test_loop_variable_of_a_walked_loop_is_what_the_iterable_holds() -> None:
    """The loop calls a layer, so its body is walked: `t` takes `held`'s elements, `h` itself."""
    [site] = refused_sites(_LOOP_BETWEEN_PROJECTIONS, ["ADP009"])
    assert site.category == "input-may-be-mutated", site.reason


_HOISTED_QKV = _PROJECTIONS + '''
    def forward(self, h):
        h = h * 2
        n = h.shape[0]
        flat = h.view(-1)
        q = self.q(h).transpose(-1, -2)
        n += 1
        k = self.k(h).transpose(-1, -2)
        total = flat.sum()
        v = self.v(h).transpose(-1, -2)
        return q * n, k + total, v


def make_example():
    return Attention(4), (torch.randn(2, 5, 4),)
'''


def test_hoisted_projections_keep_harmless_code_between() -> None:
    assert_equivalent_rewrite(_HOISTED_QKV, ["ADP009"], findings=1)


_MEMOISED_BIAS = '''
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, heads, n):
        super().__init__()
        self.biases = nn.Parameter(torch.randn(heads, n, n))
        self.cache = {}

    def get_bias(self, device):
        if self.training:
            return self.biases * 1
        else:
            key = str(device)
            if key not in self.cache:
                self.cache[key] = self.biases * 1
            return self.cache[key]

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) * 0.5 + self.get_bias(q.device)
        s = s.softmax(dim=-1)
        return s @ v


def make_example():
    return Attention(2, 5), (torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4))
'''


def test_a_memo_stored_by_a_helper_the_moved_statement_calls_is_not_a_change_of_its_inputs() -> None:
    """LeViT/EfficientFormer: the bias helper fills `self.cache` while the moved statement runs; it moves with it."""
    assert_equivalent_rewrite(_MEMOISED_BIAS, ["ADP010"], findings=1)


@pytest.mark.parametrize(
    "statement, names",
    [
        ("z += 1", {"z"}),
        ("zs[0] += 1", {"zs"}),
        ("z[0] = 0", {"z"}),
        ("z.data = w", {"z"}),
        ("del cache[k]", {"cache"}),
        ("del z", set()),
        ("z.add_(1)", {"z"}),
        ("torch.relu(z, inplace=True)", {"z"}),
        ("torch.relu(z, inplace=False)", set()),
        ("y = z.view(-1)", set()),
        ("self.c.d = 1", {"self.c"}),
    ],
)
def test_in_place_targets(statement: str, names: set[str]) -> None:
    assert in_place_targets(cst.parse_statement(statement).body[0]) == names  # type: ignore[attr-defined]

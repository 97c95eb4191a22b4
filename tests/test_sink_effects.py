"""Plan "sink" (adopter_codemods/sink.py) moves the statements before an `if` after its tests and after the lines
left before it. What they change besides the names they bind must not be read there: an object changed in place or
handed to a call that may change it (`seen.append(q)`), an attribute of `self` a helper method stores. A line left
before the `if` that reads such an object moves with them; a test that reads one refuses the site (fixture
`ADP009_fuse_qkv/neg_sink_unsafe.py`). Each rewritten case is executed against the original in float64."""

from __future__ import annotations

import pytest

from adopter_codemods.api import refused_sites, rewrite_source
from rewrite_checks import assert_equivalent_rewrite

HEADER = '''
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.act = nn.ReLU(inplace=True)
        self.calls = 0
        self.enabled = True

    def count(self):
        self.calls += 1
'''

APPENDED = HEADER + '''
    def forward(self, x, seen):
        q = self.q(x)
        seen.append(q)
        n = len(seen)
        if x.shape[0] > 1:
            return q + self.k(x) + self.v(x) + n
        return q + n


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()

    def forward(self, x):
        seen = []
        return self.attention(x, seen) + self.attention(x[:1], seen)


def make_example():
    return Twice(), (torch.randn(2, 8),), {}
'''


def test_a_line_reading_an_object_the_moved_lines_change_moves_with_them() -> None:
    """`n = len(seen)` has no call, but reads the list the moved `append` changes: left before the `if`, it would
    count one element less."""
    result = assert_equivalent_rewrite(APPENDED, ["ADP009"])
    arm = result.code.split("if x.shape[0] > 1:")[1]
    assert "n = len(seen)" in arm.split("return")[0]  # copied into the arm, after the append


def test_a_helper_changing_another_attribute_than_the_test_reads() -> None:
    source = HEADER + '''
    def forward(self, x):
        q = self.q(x)
        self.count()
        if self.enabled:
            return q + self.k(x) + self.v(x)
        return q


def make_example():
    return Attention(), (torch.randn(2, 8),), {}
'''
    result = assert_equivalent_rewrite(source, ["ADP009"])
    assert "packed_qkv_linear" in result.code


@pytest.mark.parametrize(
    ("moved", "test"),
    [
        ("seen.append(q)", "len(seen) > 1"),  # a call handed the list
        ("seen[0] = q", "seen[0] is q"),  # a store into it
        ("self.count()", "self.calls > 1"),  # a helper storing the attribute the test reads
        ("torch.nn.init.zeros_(x)", "x[0, 0] == 0"),  # an in-place function
        ("seen = self.act(x)", "x[0, 0] > 0"),  # a layer built with inplace=True
        ("seen = torch.nn.functional.relu(x, True)", "x[0, 0] > 0"),  # `inplace` passed positionally
    ],
)
def test_a_test_reading_what_the_moved_lines_change_refuses(moved: str, test: str) -> None:
    source = HEADER + f'''
    def forward(self, x, seen):
        q = self.q(x)
        {moved}
        if {test}:
            return q + self.k(x) + self.v(x)
        return q
'''
    assert not rewrite_source(source, ["ADP009"]).findings
    reasons = [r.reason for r in refused_sites(source, ["ADP009"])]
    assert any("cannot be copied into its arms" in r for r in reasons), reasons


def test_a_test_reading_a_tensor_changed_through_a_view_refuses() -> None:
    """The moved `flat.add_(1)` changes `h` through its view: any name a test reads may hold such a view or
    container, so the test reading `h` refuses the site (it would read `h` before the change)."""
    source = HEADER + '''
    def forward(self, x, h):
        flat = h.view(-1)
        q = self.q(x)
        flat.add_(1)
        if h[0, 0] > 1:
            return q + self.k(x) + self.v(x)
        return q
'''
    assert not rewrite_source(source, ["ADP009"]).findings
    reasons = [r.reason for r in refused_sites(source, ["ADP009"])]
    assert any("this test reads an object they may change" in r for r in reasons), reasons

"""ADP009: `.view` of the packed outputs (guard `qkv_views_keep_last_dim`, adopter_codemods/flow/slice_views.py).

The packed outputs are column slices of one buffer: a `.view` merging their last dim with an earlier one raises where
the packed GEMM runs (CUDA), though it works on three Linears' outputs (CPU). Checked here: each refusal of
fixtures/ADP009_fuse_qkv/neg_view_merges_last_dim.py guards a real failure (rewritten with the guard off, the model
raises with the packed GEMM forced and runs without it), and the forms the prover accepts or refuses. The accepted
forms run packed in tests/test_adp009_hoist.py (fixture views_keep_last_dim.py) and on real models (qkv_real.py).
"""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import pytest

from adopter_codemods import guards
from adopter_codemods.api import refused_sites, rewrite_source
from conftest import FIXTURES

torch = pytest.importorskip("torch")

NEGATIVE = FIXTURES / "ADP009_fuse_qkv" / "neg_view_merges_last_dim.py"
GUARD = "qkv_views_keep_last_dim"
# class -> (constructor arguments, input shape): UncheckedWidth's 10 features in 4 heads of 2 regroup rows
MODELS = {
    "MergedHeads": ((), (2, 3, 8)),
    "Flattened": ((), (2, 3, 8)),
    "InHelper": ((), (2, 3, 8)),
    "ViewAs": ((), (2, 3, 8)),
    "UncheckedWidth": ((10, 4), (2, 4, 10)),
    "ReturnedByHelper": ((), (2, 3, 8)),
    "ViewedByStaticMethod": ((), (2, 3, 8)),
    "ViewedInComprehension": ((), (2, 3, 8)),
    "HeldByDict": ((), (2, 3, 8)),
}


def test_each_negative_class_is_refused_by_the_guard_naming_its_view() -> None:
    source = NEGATIVE.read_text(encoding="utf-8")
    refused = refused_sites(source, ["ADP009"], path=str(NEGATIVE))
    assert len(refused) == len(MODELS)
    assert all(f"guard {GUARD}:" in r.reason and "is not proven to keep the last dim" in r.reason for r in refused)
    assert {r.reason.split("`")[1] for r in refused} == {
        "q.view(b, -1, self.head_dim)", "q.view(x.size(0), -1)", "t.view(t.size(0), -1)", "q.view_as(flat)",
        "self.q(x).view(b, -1, self.num_heads, self.head_dim)", "q.view(x.size(0), -1)",
        "ViewedByStaticMethod.merge(q, k, v)", "t.view(x.size(0), -1)", 'outs["q"].view(x.size(0), -1)',
    }


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_refused_rewrite_would_raise_with_the_packed_gemm(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import adopter_kernels
    from adopter_kernels.equivalence import load_source_as_module

    importlib.import_module("adopter_codemods.rule_guards")  # registers the guards, so monkeypatch restores this one
    monkeypatch.setitem(guards._GUARDS, GUARD, lambda match, placement: True)
    source = NEGATIVE.read_text(encoding="utf-8")
    result = rewrite_source(source, ["ADP009"], path=str(NEGATIVE))
    assert len(result.findings) == len(MODELS)
    original = load_source_as_module(source, f"views_original_{name}")
    rewritten = load_source_as_module(result.code, f"views_rewritten_{name}")
    args, shape = MODELS[name]
    torch.manual_seed(0)
    model = getattr(original, name)(*args)
    twin = getattr(rewritten, name)(*args)
    twin.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(*shape)
    expected = model(x)
    with adopter_kernels.use_backend("packed_qkv_linear=reference"):
        torch.testing.assert_close(twin(x), expected, rtol=0, atol=0)
    with adopter_kernels.use_backend("packed_qkv_linear=packed"), pytest.raises(RuntimeError, match="view size is not compatible"):
        twin(x)


HEADER = """import torch
from torch import nn


class A(nn.Module):
"""


def _findings(init: str, forward: str) -> int:
    source = HEADER + textwrap.indent(
        "def __init__(self, d, h):\n    super().__init__()\n" + textwrap.indent(textwrap.dedent(init), "    ")
        + "    self.q = nn.Linear(d, self.width)\n    self.k = nn.Linear(d, self.width)\n"
        + "    self.v = nn.Linear(d, self.width)\n\n"
        + "def forward(self, x):\n" + textwrap.indent(textwrap.dedent(forward), "    "),
        "    ",
    )
    return len(rewrite_source(source, ["ADP009"]).findings)


VIEWS = """
b = x.size(0)
q = self.q(x).view(b, -1, self.heads, self.head_dim)
k = self.k(x).view(b, -1, self.heads, self.head_dim)
v = self.v(x).view(b, -1, self.heads, self.head_dim)
return q, k, v
"""


@pytest.mark.parametrize(
    ("init", "packed"),
    [
        ("self.heads = h\nself.head_dim = d // h\nself.width = self.heads * self.head_dim\n", True),
        ("self.heads = h\nself.head_dim = d // h\nself.width = d\n", False),  # 10 // 4 * 4 != 10
        ("self.heads = h\nself.head_dim = d // h\nself.width = d\nif not (self.head_dim * h == d):\n    raise ValueError\n", True),
        ("self.heads = h\nself.head_dim = d // h\nself.width = d\nif d % h != 0:\n    raise ValueError\n", True),
        ("self.heads = h\nself.head_dim = d // h\nself.width = d\nassert self.head_dim * self.heads == d\n", True),
        # a width assigned twice is not known
        ("self.heads = h\nself.head_dim = d // h\nself.width = self.heads * self.head_dim\nself.width = d\n", False),
        # a check that does not raise guarantees nothing
        ("self.heads = h\nself.head_dim = d // h\nself.width = d\nif d % h != 0:\n    print('odd')\n", False),
    ],
    ids=["product", "quotient-unchecked", "not-equal-check", "modulo-check", "assert", "assigned-twice", "no-raise"],
)
def test_heads_of_the_width_init_states(init: str, packed: bool) -> None:
    assert _findings(init, VIEWS) == (1 if packed else 0)


LEADING = "self.heads = h\nself.head_dim = d // h\nself.width = d\n"


@pytest.mark.parametrize(
    ("forward", "packed"),
    [
        ("b, s, _ = x.size()\nq = self.q(x).view(b, s, -1, 4)\nk = self.k(x).view(b, s, 2, -1)\nv = self.v(x)\nreturn q, k, v.view(v.size()[:-1] + (2, 4))\n", True),
        ("q = self.q(x).view(*x.shape[:-1], -1, 4)\nk = self.k(x).view(x.shape[:-1] + (-1, 4))\nv = self.v(x)\nreturn q, k, v\n", True),
        # the rows regrouped (b * s), then the last dim split
        ("b, s, _ = x.shape\nn = b * s\nq = self.q(x).view(n, -1, 4)\nk = self.k(x)\nv = self.v(x)\nreturn q, k, v\n", True),
        # the unpacked dims out of order, or not all of them before the rest: not the rows
        ("b, s, _ = x.shape\nq = self.q(x).view(b, -1, 4)\nk = self.k(x)\nv = self.v(x)\nreturn q, k, v\n", False),
        ("s = x.size(1)\nq = self.q(x).view(-1, s, 2, 4)\nk = self.k(x)\nv = self.v(x)\nreturn q, k, v\n", False),
        # a transposed output keeps no rows in front: only a split of its own last dim is taken
        ("q = self.q(x).transpose(0, 1)\nk = self.k(x)\nv = self.v(x)\nreturn q.view(q.size()[:-1] + (2, 4)), k, v\n", True),
        ("b, s, _ = x.shape\nq = self.q(x).transpose(0, 1)\nk = self.k(x)\nv = self.v(x)\nreturn q.view(s, b, 2, 4), k, v\n", False),
        # made contiguous or computed from: any view
        ("q = self.q(x).contiguous()\nk = self.k(x) * 2\nv = self.v(x)\nreturn q.view(-1), k.view(-1), v\n", True),
        # the gate half of a query split along the last dim keeps the rows
        ("q, g = self.q(x).chunk(2, dim=-1)\nb, s, _ = x.shape\nk = self.k(x)\nv = self.v(x)\nreturn q.view(b, s, 2, 2), g, k, v\n", True),
        ("q, g = self.q(x).chunk(2, dim=1)\nb, s, _ = x.shape\nk = self.k(x)\nv = self.v(x)\nreturn q.view(b, -1, 2, 4), g, k, v\n", False),
        # what `or` or a walrus gives may be the output
        ("n = None\nq = n or self.q(x)\nk = self.k(x)\nv = self.v(x)\nreturn q.view(-1), k, v\n", False),
    ],
    ids=[
        "unpacked-rows", "spread-rows", "rows-regrouped", "rows-partly", "minus-one-first", "transposed-split",
        "transposed-regrouped", "contiguous-or-computed", "chunk-last-dim", "chunk-other-dim", "boolean-operation",
    ],
)
def test_leading_rows_and_layout(forward: str, packed: bool) -> None:
    assert _findings(LEADING, forward) == (1 if packed else 0)


def test_a_width_another_init_of_the_family_assigns_proves_nothing() -> None:
    """A subclass (or base) of the file assigning `self.head_dim` in its own __init__ runs this forward with its width."""
    base = HEADER + """    def __init__(self, d, h):
        super().__init__()
        self.heads = h
        self.head_dim = d // h
        self.width = self.heads * self.head_dim
        self.q = nn.Linear(d, self.width)
        self.k = nn.Linear(d, self.width)
        self.v = nn.Linear(d, self.width)

    def forward(self, x):
""" + textwrap.indent(VIEWS, "        ")
    assert len(rewrite_source(base, ["ADP009"]).findings) == 1
    subclass = base + """

class B(A):
    def __init__(self, d, h):
        super().__init__(d, h)
        self.head_dim = d // h // 2
"""
    assert not rewrite_source(subclass, ["ADP009"]).findings


IN_PLACE = FIXTURES / "ADP009_fuse_qkv" / "outputs_modified_in_place.py"


def test_a_view_in_a_layer_of_the_file_is_refused_and_would_raise_with_the_packed_gemm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`self.halver(self.k(h))`: the layer class's forward views its argument as `t.view(-1)`. Refused, naming the
    call; rewritten with the guard off, it raises with the packed GEMM (the other classes of the file, changing
    outputs in place, are rewritten and run: tests/test_adp009_hoist.py)."""
    import adopter_kernels
    from adopter_kernels.equivalence import load_source_as_module

    source = IN_PLACE.read_text(encoding="utf-8")
    (refused,) = [r for r in refused_sites(source, ["ADP009"]) if r.cls == "ChangedInALayer"]
    assert "`self.halver(self.k(h))` (its `forward` calls `.view` on it) is not proven" in refused.reason
    importlib.import_module("adopter_codemods.rule_guards")  # registers the guards, so monkeypatch restores this one
    monkeypatch.setitem(guards._GUARDS, GUARD, lambda match, placement: True)
    result = rewrite_source(source, ["ADP009"], path=str(IN_PLACE))
    assert "k = self.halver(k_out)" in result.code
    rewritten = load_source_as_module(result.code, "in_layer_view_rewritten")
    original = load_source_as_module(source, "in_layer_view_original")
    torch.manual_seed(0)
    model = original.ChangedInALayer(8)
    twin = rewritten.ChangedInALayer(8)
    twin.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(2, 3, 8)
    with adopter_kernels.use_backend("packed_qkv_linear=reference"):
        for got, want in zip(twin(x), model(x)):
            torch.testing.assert_close(got, want)
    with adopter_kernels.use_backend("packed_qkv_linear=packed"), pytest.raises(RuntimeError, match="view"):
        twin(x)


LAYER_OF_THE_FILE = """import torch
from torch import nn


class Flattener(nn.Module):
    def _flat(self, t):
        return t.view(-1)

    def forward(self, t):
        return self._flat(t) * 2


class Copier(nn.Module):
    def _own(self, t):
        return t.contiguous()

    def forward(self, t):
        return self._own(t).view(-1)


class A(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.layer = {layer}()

    def forward(self, h):
        q = self.q(h)
        k = self.layer(self.k(h))
        v = self.v(h)
        return q, k, v
"""


@pytest.mark.parametrize("layer, packed", [("Flattener", False), ("Copier", True)])
def test_a_layer_class_is_read_with_its_own_helpers(layer: str, packed: bool) -> None:
    """The forward of a layer class the output is passed to is read in that class: `Flattener` views its argument
    in its own helper `_flat` (refused, naming the call), `Copier`'s helper returns a copy, which may be viewed."""
    source = LAYER_OF_THE_FILE.format(layer=layer)
    assert bool(rewrite_source(source, ["ADP009"]).findings) is packed
    if not packed:
        (refused,) = refused_sites(source, ["ADP009"])
        assert "`self.layer(self.k(h))` (its `forward` calls `.view` on it)" in refused.reason


def test_a_view_written_over_lines_is_named_on_one() -> None:
    """fairseq writes its views over several lines, with comments: the refusal names the call on one line."""
    source = HEADER + textwrap.indent(textwrap.dedent("""
        def __init__(self, d):
            super().__init__()
            self.q = nn.Linear(d, d)
            self.k = nn.Linear(d, d)
            self.v = nn.Linear(d, d)

        def forward(self, x):
            q = self.q(x)
            k = self.k(x)
            v = self.v(x)
            k = k.view(
                -1,  # rows and heads merged
                x.size(-1),
            )
            return q, k, v
    """), "    ")
    (refused,) = refused_sites(source, ["ADP009"])
    assert "`k.view(-1, x.size(-1))` is not proven to keep the last dim" in refused.reason

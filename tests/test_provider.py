"""ModelStructureProvider: __init__ bindings, the forward graph read as its paths (branches, early returns, loops,
try/with, helpers, aliases, unchained nesting), class families, and what keeps the walk cheap."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from adopter_codemods import provider
from adopter_codemods.provider import ModelStructureProvider, build_module_structure
from adopter_codemods.flow.graph import GraphPath
from adopter_codemods.structure import ClassStructure, Def, DLNode, Use

HEADER = "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\nfrom torch.nn import LayerNorm as LN\n\n\n"


def structure_of(source: str) -> dict[str, ClassStructure]:
    module = cst.parse_module(HEADER + textwrap.dedent(source))
    return {c.name: c for c in build_module_structure(module).classes}


def one_class(body: str) -> ClassStructure:
    (cls,) = structure_of("class M(nn.Module):\n" + textwrap.indent(textwrap.dedent(body), "    ")).values()
    return cls


INIT = """
def __init__(self, cfg):
    super().__init__()
    self.drop = nn.Dropout(0.1)
    self.ln = LN(8, eps=1e-12)
    self.act = F.gelu
    self.block = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
"""


def paths_of(cls: ClassStructure) -> list[GraphPath]:
    """The entry-to-exit paths of every graph of the class."""
    return [p for graph in cls.graphs for p in graph.paths()]


def layers(path: GraphPath) -> list[str]:
    """The path's DSL nodes as `layer`, `func:name` or `op:+`."""
    out = []
    for n in path.nodes:
        if n.kind == "layer":
            out.append(n.layer or "")
        elif n.kind == "func":
            out.append("func:" + (n.qualname or "").rsplit(".", 1)[-1])
        else:
            out.append("op:" + (n.qualname or ""))
    return out


def forward(body: str, extra: str = "") -> ClassStructure:
    return one_class(INIT + "\ndef forward(self, x, r):\n" + textwrap.indent(textwrap.dedent(body), "    ") + extra)


# ------------------------------------------------------------------------------------------ __init__


def test_bindings_resolve_aliases_and_sequential_elements() -> None:
    cls = forward("return x")
    b = cls.init_bindings
    assert [x.qualname for x in b["drop"]] == ["torch.nn.Dropout"]
    assert [x.qualname for x in b["ln"]] == ["torch.nn.LayerNorm"]  # `from torch.nn import LayerNorm as LN`
    assert b["act"][0].qualname is None  # not a call: no layer type
    (seq,) = b["block"]
    assert seq.qualname == "torch.nn.Sequential"
    assert [(e.attr, e.qualname, e.container is seq) for e in seq.elements] == [
        ("block.0", "torch.nn.Linear", True),
        ("block.1", "torch.nn.ReLU", True),
    ]
    assert not any(x.conditional for bs in b.values() for x in bs)


def test_conditional_and_repeated_bindings() -> None:
    cls = one_class("""
        def __init__(self, cfg):
            super().__init__()
            if cfg:
                self.norm = nn.LayerNorm(8)
            else:
                self.norm = nn.Identity()
            self.p: nn.Module = nn.Dropout(0.2)

        def forward(self, x):
            return self.norm(x)
    """)
    assert [(b.qualname, b.conditional) for b in cls.init_bindings["norm"]] == [
        ("torch.nn.LayerNorm", True),
        ("torch.nn.Identity", True),
    ]
    assert cls.init_bindings["p"][0].qualname == "torch.nn.Dropout"  # annotated assignment


# ------------------------------------------------------------------------------------------ forward paths


def test_nested_calls_are_unchained_in_evaluation_order() -> None:
    cls = forward("return self.ln(self.drop(x) + F.softmax(r, dim=-1))")
    (path,) = paths_of(cls)
    assert layers(path) == ["self.drop", "func:softmax", "op:+", "self.ln"]
    drop, softmax, add, ln = path.nodes
    assert [a.vid for a in add.args] == [drop.out, softmax.out]
    assert ln.args[0].vid == add.out
    assert softmax.kwargs[0][0] == "dim" and softmax.kwargs[0][1].kind == "const"
    assert ln.whole_statement and not drop.whole_statement and drop.parent is add.expr


def test_if_elif_else_and_early_return() -> None:
    cls = forward("""
        if x is None:
            return self.drop(r)
        if r.dim() == 2:
            h = self.drop(x)
        elif r.dim() == 3:
            h = self.ln(x)
        else:
            h = x
        return self.ln(h)
    """)
    assert sorted(map(tuple, map(layers, paths_of(cls)))) == sorted(
        [("self.drop",), ("self.drop", "self.ln"), ("self.ln", "self.ln"), ("self.ln",)]
    )


def test_branches_without_dsl_calls_are_one_opaque_event() -> None:
    cls = forward("""
        if x is None:
            return r
        return self.drop(x)
    """)
    (path,) = paths_of(cls)  # no fork: the `if` only reads x and r
    assert layers(path) == ["self.drop"]


def test_aliases_share_the_value_id_and_reassignment_makes_a_new_one() -> None:
    cls = forward("""
        h = x
        h2 = h
        a = self.drop(h2)
        h = self.drop(h)
        return self.ln(a + h)
    """)
    (path,) = paths_of(cls)
    d1, d2, add, _ = path.nodes
    assert d1.args[0].vid == d2.args[0].vid  # x, h and h2 are one value
    assert add.args[0].vid == d1.out and add.args[1].vid == d2.out
    defs = [e for e in path.events if isinstance(e, Def)]
    assert [d.name for d in defs][:3] == ["h", "h2", "a"]
    # `h2 = h` reads h: an alias is a use of what it copies.
    assert any(isinstance(e, Use) and d1.args[0].vid in e.vids for e in path.events[: path.events.index(d1)])


def test_a_tuple_of_names_assigned_a_display_binds_each_its_element() -> None:
    """`a, h = self.drop(x), r`: as two statements would (LLaMA's `xq, xk, xv = self.wq(x), ...`), every element
    evaluated before any name changes (`h, a = a, h` swaps them)."""
    cls = forward("""
        a, h = self.drop(x), r
        h, a = a, h
        return self.ln(a + h)
    """)
    (path,) = paths_of(cls)
    drop, add, _ = path.nodes
    x_vid, r_vid = drop.args[0].vid, next(e.vid for e in path.events if isinstance(e, Def) and e.name == "h")
    assert add.args[0].vid == r_vid and add.args[1].vid == drop.out
    assert x_vid != r_vid


def test_loop_body_is_walked_twice_in_separate_copies_plus_the_skip_path() -> None:
    cls = forward("""
        for _ in range(3):
            x = self.drop(x)
        return x
    """)
    paths = sorted(paths_of(cls), key=lambda p: len(p.nodes))
    assert [len(p.nodes) for p in paths] == [0, 2]
    first, second = paths[1].nodes
    assert first.site.loop_copy != second.site.loop_copy
    assert second.args[0].vid == first.out  # loop-carried value


def test_try_with_and_raise() -> None:
    cls = forward("""
        try:
            h = self.drop(x)
        except ValueError:
            raise
        with torch.no_grad():
            h = self.ln(h)
        return h
    """)
    assert sorted(map(tuple, map(layers, paths_of(cls)))) == [(), ("self.drop", "self.ln")]


def test_helpers_are_inlined_with_parameters_bound_to_arguments() -> None:
    cls = forward("return self.helper(x, scale=r)", extra="""

def helper(self, a, scale=None):
    b = self.drop(a)
    return self.ln(b * scale)
""")
    (path,) = paths_of(cls)
    assert layers(path) == ["self.drop", "op:*", "self.ln"]
    drop, mul, _ = path.nodes
    assert drop.site.function == "M.helper" and len(drop.site.inline_stack) == 1
    x_vid = drop.args[0].vid
    assert any(isinstance(e, Def) and e.name.endswith("::a") and e.vid == x_vid for e in path.events)
    assert mul.args[1].kind == "var"  # `scale` is bound to r


def test_recursive_helpers_are_inlined_once() -> None:
    cls = forward("return self.rec(x, 2)", extra="""

def rec(self, a, n):
    if n == 0:
        return self.drop(a)
    return self.rec(a, n - 1)
""")
    assert sorted(map(tuple, map(layers, paths_of(cls)))) == [("op:-",), ("self.drop",)]


def test_star_args_calls_are_opaque() -> None:
    cls = forward("return self.ln(*[x])")
    assert [layers(p) for p in paths_of(cls)] == [[]]


# ------------------------------------------------------------------------------------------ classes, limits


def test_only_nn_module_classes_and_their_local_subclasses() -> None:
    classes = structure_of("""
        from ...modeling_utils import SomePreTrainedModel

        class Plain:
            def forward(self, x):
                return x

        class Base(nn.Module):
            pass

        class Child(Base):
            def forward(self, x):
                return x

        class Pre(SomePreTrainedModel):
            pass
    """)
    assert sorted(classes) == ["Base", "Child", "Pre"]


def test_inherited_forward_belongs_to_the_defining_class() -> None:
    classes = structure_of("""
        class Base(nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = nn.Dropout(0.1)

            def forward(self, x):
                return self.drop(x)

        class Child(Base):
            pass
    """)
    assert [layers(p) for p in paths_of(classes["Base"])] == [["self.drop"]]
    assert classes["Child"].graphs == []
    assert classes["Child"].init_bindings.keys() == {"drop"}  # inherited __init__


def test_many_paths_are_one_walk_per_statement() -> None:
    # 128 paths through forward's branches, each calling a helper with 16 paths: 2048 paths, yet the walk forks
    # once per branch and visits each statement once (partial paths merge at every join).
    def branches(var: str, n: int) -> str:
        return "".join(f"if {var}.shape[{i}] > 1:\n    {var} = self.drop({var})\n" for i in range(n))

    source = "class M(nn.Module):\n" + textwrap.indent(
        "def __init__(self):\n    super().__init__()\n    self.drop = nn.Dropout(0.1)\n\n"
        + "def forward(self, x):\n" + textwrap.indent(branches("x", 7) + "return self.helper(x)\n", "    ")
        + "\ndef helper(self, a):\n" + textwrap.indent(branches("a", 4) + "return a\n", "    "),
        "    ",
    )
    forks = 0
    real_fork = provider._ClassWalker.fork

    def counting_fork(p):  # type: ignore[no-untyped-def]
        nonlocal forks
        forks += 1
        return real_fork(p)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(provider._ClassWalker, "fork", staticmethod(counting_fork))
        (cls,) = structure_of(source).values()
        (graph,) = cls.graphs
    assert not cls.truncated and cls.skipped == []
    assert forks == 2 * (7 + 4)  # an if without else: one fork per arm
    assert sum(1 for n in graph.nodes if n.layer == "self.drop") == 7 + 4
    assert len(graph.paths()) == 2**11


def test_paths_are_walked_only_when_read() -> None:
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        real = provider._ClassWalker.forward_graphs
        mp.setattr(provider._ClassWalker, "forward_graphs", lambda self: calls.append(1) or real(self))
        cls = forward("return self.drop(x)")
        assert calls == []
        assert [layers(p) for p in paths_of(cls)] == [["self.drop"]]
        _ = cls.graphs  # read again: cached, no second walk
        assert calls == [1]


def test_callees_and_family_facts() -> None:
    classes = structure_of("""
        class Base(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln = nn.LayerNorm(8)

            def forward(self, x):
                return F.softmax(self.ln(x), dim=-1)

        class Child(Base):
            def reset(self):
                self.ln = nn.LayerNorm(8)
                setattr(self, "other", None)

        class Outer(nn.Module):
            def forward(self, m):
                return m.inner.ln
    """)
    assert "torch.nn.functional.softmax" in classes["Base"].callees
    assert "torch.nn.functional.softmax" in classes["Child"].callees  # inherited forward may call it
    assert classes["Base"].rebound == {"ln", "other"}  # rebound by a subclass method and setattr
    assert {"inner", "ln"} <= classes["Base"].foreign_attributes


def test_metadata_provider_computes_the_structure_once() -> None:
    from libcst.metadata import MetadataWrapper

    module = cst.parse_module(HEADER + "class M(nn.Module):\n    pass\n")
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    first = wrapper.resolve(ModelStructureProvider)[module]
    assert first is wrapper.resolve(ModelStructureProvider)[module]
    assert [c.name for c in first.classes] == ["M"]


def test_dl_nodes_link_back_to_their_statements() -> None:
    cls = forward("""
        h = self.drop(x)
        return h
    """)
    (node,) = paths_of(cls)[0].nodes
    assert isinstance(node, DLNode) and isinstance(node.site.small, cst.Assign)
    assert node.site.small in node.site.line.body  # type: ignore[attr-defined]
    assert node.site.line in node.site.block and node.site.function == "M.forward"


def test_unpacking_a_variable_reads_it() -> None:
    """`a, b = h` reads `h` (its definition must stay, and a rewrite hiding `h` must see the read)."""
    cls = forward("""
        h = self.drop(x)
        a, b = h
        return a
    """)
    (path,) = paths_of(cls)
    (drop,) = path.nodes
    unpacking = [e for e in path.events if isinstance(e, Use) and drop.out in e.vids]
    assert unpacking and unpacking[0].names == ("h",)


def test_a_helper_returning_an_opaque_expression_reads_by_name_where_it_returns() -> None:
    """`return t.view(-1)` in an inlined helper: a use of `t` at the helper's return statement (which the caller's
    assignment of the result does not name), so analyses of statements see the statement computing it."""
    cls = one_class(INIT + """
def _flat(self, t):
    return t.view(-1)

def forward(self, x, r):
    return self._flat(self.drop(x))
""")
    (path,) = paths_of(cls)
    (drop,) = path.nodes
    uses = [e for e in path.events if isinstance(e, Use) and drop.out in e.vids and e.site.scope]
    assert uses and uses[0].names == ("_flat@1::t",) and isinstance(uses[0].site.small, cst.Return)

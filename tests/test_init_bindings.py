"""The binding model of adopter_codemods/init_bindings.py: layer types however ``__init__`` builds them."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from adopter_codemods.api import rewrite_source, scan_source
from adopter_codemods.provider import build_module_structure
from adopter_codemods.structure import CERTAIN, OPAQUE, POSSIBLE, UNKNOWN, ClassStructure, LayerBinding, LayerType

CONV = "torch.nn.Conv2d"
BN = "torch.nn.BatchNorm2d"


def _classes(source: str) -> dict[str, ClassStructure]:
    structure = build_module_structure(cst.parse_module(textwrap.dedent(source)))
    return {c.name: c for c in structure.classes}


def _binding(source: str, cls: str, attr: str) -> LayerBinding:
    (binding,) = _classes(source)[cls].init_bindings[attr]
    return binding


def _args(binding: LayerBinding) -> list[str]:
    return [cst.Module([]).code_for_node(a).rstrip(", ") for a in binding.args]


def test_join_of_layer_types() -> None:
    conv, bn, unknown = LayerType(CERTAIN, (CONV,)), LayerType(CERTAIN, (BN,)), LayerType(UNKNOWN)
    assert conv.join(conv) == conv
    assert conv.join(unknown) == LayerType(POSSIBLE, (CONV,))
    assert conv.join(bn) == bn.join(conv) == LayerType(POSSIBLE, (BN, CONV))
    assert unknown.join(unknown) == unknown
    assert conv.certain == CONV and LayerType(POSSIBLE, (CONV,)).certain is None


HEADER = """
    import functools
    from collections import OrderedDict
    import torch
    from torch import nn

    def conv3x3(in_planes, out_planes, stride=1, dilation=1):
        \"\"\"doc\"\"\"
        return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation, bias=False)

    def conv_scaled(planes, k=2):
        return nn.Conv2d(planes, planes * k, 1)
"""


@pytest.mark.parametrize(
    ("init", "certainty", "candidates", "direct"),
    [
        ("self.bn = nn.BatchNorm2d(c)", CERTAIN, (BN,), True),
        ("norm = nn.BatchNorm2d\nself.bn = norm(c)", CERTAIN, (BN,), True),  # an alias of the type itself
        ("self.bn = norm_layer(c)", POSSIBLE, (BN,), False),  # parameter default: a caller may pass another
        ("self.bn = other(c)", UNKNOWN, (), False),  # parameter without default
        ("if other is None:\n    other = nn.BatchNorm2d\nself.bn = other(c)", POSSIBLE, (BN,), False),
        ("other = other or nn.BatchNorm2d\nself.bn = other(c)", POSSIBLE, (BN,), False),
        ("norm = functools.partial(nn.BatchNorm2d, eps=1e-3)\nself.bn = norm(c)", CERTAIN, (BN,), False),
        ("norm = nn.BatchNorm2d if c else nn.GroupNorm\nself.bn = norm(c)", POSSIBLE, (BN, "torch.nn.GroupNorm"), False),
        ("norm = nn.BatchNorm2d\nif c:\n    norm = nn.GroupNorm\nself.bn = norm(c)", POSSIBLE,
         (BN, "torch.nn.GroupNorm"), False),
        ("self.bn = conv3x3(c, c)", CERTAIN, (CONV,), False),
        # converted where built: the layer the inner call builds (DeepSeek-V4's `Norm(d).to(dtype=torch.float32)`)
        ("self.bn = nn.BatchNorm2d(c).to(dtype=torch.float32)", CERTAIN, (BN,), True),
        ("self.bn = nn.BatchNorm2d(c).half().cuda()", CERTAIN, (BN,), True),
        ("self.bn = norm_layer(c).float()", POSSIBLE, (BN,), False),
        # a mode change is no conversion: a fused replacement would also run the layers it absorbs in that mode
        ("self.bn = nn.BatchNorm2d(c).eval()", UNKNOWN, (), False),
        ("self.bn = nn.BatchNorm2d(c).requires_grad_(False)", UNKNOWN, (), False),
    ],
)
def test_layer_types(init: str, certainty: str, candidates: tuple[str, ...], direct: bool) -> None:
    source = HEADER + f"""
    class M(nn.Module):
        def __init__(self, c, other, norm_layer=nn.BatchNorm2d):
            super().__init__()
            {textwrap.indent(init, " " * 12).lstrip()}
    """
    binding = _binding(source, "M", "bn")
    assert binding.layer_type == LayerType(certainty, candidates)
    assert binding.qualname == (candidates[0] if certainty == CERTAIN else None)
    assert binding.direct is direct


def test_factory_arguments_are_mapped_through_its_signature() -> None:
    source = HEADER + """
    class M(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a = conv3x3(c, 2 * c, dilation=2)
            self.b = conv_scaled(c)
            self.n = functools.partial(nn.BatchNorm2d, eps=1e-3)(c)
    """
    a = _binding(source, "M", "a")
    assert a.args_known and _args(a) == ["c", "2 * c", "kernel_size=3", "stride=1", "padding=2", "bias=False"]
    b = _binding(source, "M", "b")
    assert b.layer_type.certain == CONV and not b.args_known  # `planes * k` computes with a parameter
    n = _binding(source, "M", "n")
    assert n.layer_type.certain == BN and _args(n) == ["eps=1e-3", "c"]


def _elements(container: LayerBinding) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(e.attr, e.layer_type.certainty, e.layer_type.candidates) for e in container.elements]


def test_sequential_from_a_list_with_conditional_elements() -> None:
    cls = _classes(HEADER + """
    class M(nn.Module):
        def __init__(self, c, expand, norm_layer=None):
            super().__init__()
            if norm_layer is None:
                norm_layer = nn.BatchNorm2d
            layers = []
            if expand:
                layers.append(nn.ReLU())
            layers.extend([nn.Conv2d(c, c, 1), norm_layer(c)])
            layers += [nn.Dropout()]
            self.block = nn.Sequential(*layers)
    """)["M"]
    (container,) = cls.containers
    assert container is cls.init_bindings["block"][0]
    assert _elements(container) == [
        ("block.0", CERTAIN, ("torch.nn.ReLU",)),
        ("block.1", OPAQUE, ()),  # the arm ends: what follows is not always the ReLU's neighbour
        ("block.1", CERTAIN, (CONV,)),
        ("block.2", POSSIBLE, (BN,)),
        ("block.3", CERTAIN, ("torch.nn.Dropout",)),
    ]
    assert len(cls.container_graphs) == 1 and len(cls.container_graphs[0].nodes) == 5


def test_ordered_dict_subclass_and_helper_containers() -> None:
    classes = _classes(HEADER + """
    class Named(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.head = nn.Sequential(OrderedDict([("conv", nn.Conv2d(c, c, 1)), ("bn", nn.BatchNorm2d(c))]))

    class CNA(torch.nn.Sequential):
        def __init__(self, c, conv_layer=torch.nn.Conv2d):
            layers = [conv_layer(c, c, 1)]
            layers.append(torch.nn.BatchNorm2d(c))
            super().__init__(*layers)

    class Net(nn.Module):
        def __init__(self, norm_layer=nn.BatchNorm2d):
            super().__init__()
            self._norm_layer = norm_layer
            self.layer = self._make_layer(4)

        def _make_layer(self, c):
            norm_layer = self._norm_layer
            return nn.Sequential(conv3x3(c, c), norm_layer(c))
    """)
    assert _elements(classes["Named"].containers[0]) == [("head.conv", CERTAIN, (CONV,)), ("head.bn", CERTAIN, (BN,))]
    (cna,) = classes["CNA"].containers
    assert isinstance(cna.value, cst.Attribute) and cna.where == "__init__"  # the base in the class line
    assert _elements(cna) == [("0", POSSIBLE, (CONV,)), ("1", CERTAIN, (BN,))]
    (made,) = classes["Net"].containers
    assert made.where == "Net._make_layer"
    assert _elements(made) == [("Sequential.0", CERTAIN, (CONV,)), ("Sequential.1", POSSIBLE, (BN,))]


@pytest.mark.parametrize(
    "escape",
    [
        "reorder(layers)",  # handed to a function: it may change the list
        "layers[0] = nn.Identity()",
        "layers.insert(0, nn.Identity())",
        "other = layers",
    ],
)
def test_a_list_that_escapes_has_no_elements(escape: str) -> None:
    source = HEADER + f"""
    class M(nn.Module):
        def __init__(self, c):
            super().__init__()
            layers = [nn.Conv2d(c, c, 1), nn.BatchNorm2d(c)]
            {escape}
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            return self.block(x)
    """
    assert _classes(source)["M"].containers == []
    assert scan_source(textwrap.dedent(source), ["ADP007"]) == []
    kept = textwrap.dedent(source).replace(escape, "pass")
    assert [f.certainty for f in scan_source(kept, ["ADP007"])] == ["exact"]  # the negative is not vacuous


def test_certainty_of_findings() -> None:
    source = HEADER + """
    class M(nn.Module):
        def __init__(self, c, norm_layer=nn.BatchNorm2d, other=None):
            super().__init__()
            self.conv1 = conv3x3(c, c)
            self.bn1 = nn.BatchNorm2d(c)
            self.conv2 = nn.Conv2d(c, c, 1)
            self.bn2 = norm_layer(c)
            self.conv3 = nn.Conv2d(c, c, 1)
            self.bn3 = other(c)

        def forward(self, x):
            x = self.bn1(self.conv1(x))
            x = self.bn2(self.conv2(x))
            return self.bn3(self.conv3(x))
    """
    findings = scan_source(textwrap.dedent(source), ["ADP007"])
    # conv3 -> bn3 (unknown type) is no finding: nothing in the code names BatchNorm2d there
    assert [(f.message.split("(")[-1], f.certainty) for f in findings] == [
        ("self.conv1, self.bn1)", "exact"),
        ("self.conv2, self.bn2)", "guarded"),
    ]


def test_possible_types_get_the_guarded_form_that_keeps_init() -> None:
    # ADP005's __init__ edit (the fused LayerNorm class) needs a certain, direct binding; where the type is only
    # possible or built by a factory, the form that calls the model's own modules applies (`uncertain guarded`)
    source = """
    from torch import nn

    class SelfOutput(nn.Module):
        def __init__(self, hidden, norm_layer=nn.LayerNorm):
            super().__init__()
            self.LayerNorm = NORM
            self.dropout = nn.Dropout(0.1)

        def forward(self, h, x):
            return self.LayerNorm(self.dropout(h) + x)
    """
    source = textwrap.dedent(source)
    possible = source.replace("NORM", "norm_layer(hidden)")
    assert [f.certainty for f in scan_source(possible, ["ADP005"])] == ["guarded"]
    assert "dropout_add_layer_norm_module(h, x, self.LayerNorm, self.dropout)" in rewrite_source(possible, ["ADP005"]).code
    assert [f.certainty for f in scan_source(source.replace("NORM", "nn.LayerNorm(hidden)"), ["ADP005"])] == ["exact"]
    # an alias of the type is the type: the __init__ edit may replace its call
    local = source.replace("NORM", "norm(hidden)").replace("super().__init__()", "super().__init__()\n        norm = nn.LayerNorm")
    assert [f.certainty for f in scan_source(local, ["ADP005"])] == ["exact"]
    # a factory is not: replacing `make_norm(hidden)` by the fused class would skip what the factory does, so the
    # module form applies
    factory = source.replace("NORM", "make_norm(hidden)") + "\n\ndef make_norm(h):\n    return nn.LayerNorm(h)\n"
    result = rewrite_source(factory, ["ADP005"])
    assert "make_norm(hidden)" in result.code and "dropout_add_layer_norm_module(" in result.code


def test_an_element_and_a_layer_outside_its_container_are_no_pair() -> None:
    source = """
    from torch import nn

    class M(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.stem = nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, 1))
            self.bn = nn.BatchNorm2d(c)

        def forward(self, x):
            return self.bn(self.stem(x))
    """
    assert scan_source(textwrap.dedent(source), ["ADP007"]) == []
    inside = textwrap.dedent(source).replace("nn.Conv2d(c, c, 1))", "nn.Conv2d(c, c, 1), nn.BatchNorm2d(c))")
    assert [f.certainty for f in scan_source(inside, ["ADP007"])] == ["exact"]


def test_a_layer_also_bound_to_none_keeps_its_certain_type() -> None:
    source = """
    from torch import nn

    class M(nn.Module):
        def __init__(self, c, use_norm, other):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 1)
            if use_norm:
                self.norm = nn.BatchNorm2d(c)
            else:
                self.norm = OTHER

        def forward(self, x):
            x = self.conv(x)
            if self.norm is not None:
                x = self.norm(x)
            return x
    """
    source = textwrap.dedent(source)
    assert [f.certainty for f in scan_source(source.replace("OTHER", "None"), ["ADP007"])] == ["exact"]
    assert [f.certainty for f in scan_source(source.replace("OTHER", "other"), ["ADP007"])] == ["guarded"]

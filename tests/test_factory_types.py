"""Layer types built by functions of other files (adopter_codemods/factory_types.py), on throwaway packages: what a
factory may return (certain, possible, unknown), parameters passed through, registries, re-exports, and what stays
unknown; the bindings InitReader then holds, the ADP007 findings, and scan's cache when a factory file changes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from adopter_codemods import cli, files
from adopter_codemods.api import scan_source
from adopter_codemods.class_bases import BaseResolver, dependencies_unchanged
from adopter_codemods.factory_types import FactoryTypes, Types
from adopter_codemods.provider import build_module_structure
from adopter_codemods.structure import CERTAIN, POSSIBLE, UNKNOWN, LayerType

LAYERS = {
    "pkg/__init__.py": "",
    "pkg/layers/__init__.py": """\
        from .convs import conv3x3, create_conv
        from .get_norm import get_norm
        from .odd import cached, generator, recursive, redefined, tupled
        """,
    "pkg/layers/convs.py": """\
        from torch import nn

        from .same import Conv2dSame


        def conv3x3(a, b):
            return nn.Conv2d(a, b, 3, padding=1)


        def _pad(a, b, k, padding):
            if padding == "same":
                return Conv2dSame(a, b, k)
            return nn.Conv2d(a, b, k, padding=k // 2)


        def create_conv(a, b, k, padding=""):
            m = _pad(a, b, k, padding)
            return m
        """,
    "pkg/layers/same.py": """\
        from torch import nn


        class Conv2dSame(nn.Conv2d):
            pass
        """,
    # Named like the function it defines, as timm's create_conv2d.py: `from pkg.layers import get_norm` is the
    # function the package's __init__ binds, not the submodule.
    "pkg/layers/get_norm.py": """\
        import functools

        import torch.nn as nn

        _MAP = dict(batchnorm=nn.BatchNorm2d, group=nn.GroupNorm)


        def get_norm(norm_layer, **kw):
            if isinstance(norm_layer, str):
                layer = _MAP[norm_layer]
            else:
                layer = norm_layer
            if kw:
                layer = functools.partial(layer, **kw)
            return layer
        """,
    "pkg/layers/odd.py": """\
        import functools

        from torch import nn


        @functools.lru_cache(maxsize=None)
        def cached(c):
            return nn.Conv2d(c, c, 1)


        def generator(c):
            yield nn.Conv2d(c, c, 1)


        def recursive(c, n):
            return nn.Conv2d(c, c, 1) if n == 0 else recursive(c, n - 1)


        try:
            from elsewhere import redefined
        except ImportError:
            def redefined(c):
                return nn.Conv2d(c, c, 1)


        def tupled(c):
            conv, norm = nn.Conv2d(c, c, 1), nn.BatchNorm2d(c)
            return conv
        """,
}


def write(root: Path, tree: dict[str, str]) -> None:
    for name, text in tree.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    write(tmp_path, {**LAYERS, "pkg/model.py": "x = 1\n"})
    return tmp_path


def returned(root: Path, qualname: str, *args: tuple[str | None, Types]) -> tuple[LayerType, LayerType]:
    """(layer type of the call's result, type its result builds when called)."""
    factories = FactoryTypes(BaseResolver(str(root / "pkg" / "model.py")))
    function = factories.function(qualname)
    assert function is not None, qualname
    value = factories.call(function, list(args))
    return value.layer.layer_type(), value.builds.layer_type()


def test_one_type_on_every_path_is_certain(package: Path) -> None:
    assert returned(package, "pkg.layers.conv3x3")[0] == LayerType(CERTAIN, ("torch.nn.Conv2d",))


def test_several_types_are_possible_through_nested_factories(package: Path) -> None:
    layer, builds = returned(package, "pkg.layers.create_conv")
    assert layer == LayerType(POSSIBLE, ("pkg.layers.same.Conv2dSame", "torch.nn.Conv2d"))
    assert builds.certainty == UNKNOWN  # calling a conv builds no layer the code names


def test_parameter_passed_through_joins_the_registry(package: Path) -> None:
    passed = Types(frozenset({"torch.nn.BatchNorm2d"}), True)  # `norm_layer=nn.BatchNorm2d`: possible
    _, builds = returned(package, "pkg.layers.get_norm", (None, passed))
    assert builds == LayerType(POSSIBLE, ("torch.nn.BatchNorm2d", "torch.nn.GroupNorm"))
    custom = Types(frozenset({"mine.Norm"}))
    _, builds = returned(package, "pkg.layers.get_norm", (None, custom))
    # a registry may be extended at run time: possible even with one name
    assert builds == LayerType(POSSIBLE, ("mine.Norm", "torch.nn.BatchNorm2d", "torch.nn.GroupNorm"))


@pytest.mark.parametrize("name", ["cached", "generator", "recursive", "tupled"])
def test_what_is_not_modelled_names_no_certain_type(package: Path, name: str) -> None:
    layer, _ = returned(package, f"pkg.layers.{name}")
    assert layer.certainty != CERTAIN
    if name != "recursive":  # recursion: the base case's Conv2d, or whatever the recursive call returns
        assert layer.certainty == UNKNOWN


def test_a_function_bound_twice_is_not_followed(package: Path) -> None:
    factories = FactoryTypes(BaseResolver(str(package / "pkg" / "model.py")))
    assert factories.function("pkg.layers.redefined") is None
    assert factories.function("pkg.layers.same.Conv2dSame") is None  # a class: read by name, as before
    assert factories.function("torch.nn.Conv2d") is None  # torch's names are not looked up


MODEL = """\
from torch import nn

from pkg.layers import conv3x3, create_conv, get_norm


class Block(nn.Module):
    def __init__(self, c, norm_layer=nn.BatchNorm2d):
        super().__init__()
        norm = get_norm(norm_layer)
        self.conv1 = conv3x3(c, c)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = create_conv(c, c, 3)
        self.bn2 = norm(c)
        self.seq = nn.Sequential(*[create_conv(c, c, 1), norm(c)])

    def forward(self, x):
        x = self.seq(x)
        x = self.bn1(self.conv1(x))
        return self.bn2(self.conv2(x))
"""


def test_bindings_and_findings(package: Path) -> None:
    path = package / "pkg" / "model.py"
    path.write_text(MODEL, encoding="utf-8")
    module = cst.parse_module(MODEL)
    structure = build_module_structure(module, str(path))
    (block,) = structure.classes
    types = {attr: bindings[0].layer_type.certainty for attr, bindings in block.init_bindings.items()}
    assert types == {"conv1": CERTAIN, "bn1": CERTAIN, "conv2": POSSIBLE, "bn2": POSSIBLE, "seq": CERTAIN}
    assert not block.init_bindings["conv2"][0].direct  # a factory's call: no __init__ edit may replace it
    findings = scan_source(MODEL, ["ADP007"], path=str(path))
    assert [(f.line, f.certainty) for f in findings] == [(14, "guarded"), (18, "exact"), (19, "guarded")]
    # Without the file's path nothing is looked up: the factories' names are their types, which match nothing.
    assert scan_source(MODEL, ["ADP007"]) == []


def test_dependencies_record_the_factory_files(package: Path) -> None:
    path = package / "pkg" / "model.py"
    path.write_text(MODEL, encoding="utf-8")
    record = build_module_structure(cst.parse_module(MODEL), str(path)).dependencies
    read = {Path(f[0]).name for f in record["files"]}  # type: ignore[index, union-attr]
    assert {"convs.py", "same.py", "get_norm.py"} <= read
    assert not any("torch" in f[0] for f in record["files"])  # type: ignore[index, union-attr]
    assert dependencies_unchanged(record, str(path))
    (package / "pkg" / "layers" / "get_norm.py").write_text("def get_norm(n):\n    return n\n", encoding="utf-8")
    assert not dependencies_unchanged(record, str(path))


def test_scan_cache_misses_when_a_factory_file_changes(package: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys) -> None:  # type: ignore[no-untyped-def]
    (package / "pkg" / "model.py").write_text(MODEL, encoding="utf-8")
    monkeypatch.chdir(package)
    monkeypatch.delenv("ADOPTER_CACHE_DIR", raising=False)

    def scan() -> list[int]:
        cli.main(["scan", "--format", "json", "--no-progress", "--rules", "ADP007", "pkg/model.py"])
        return [f["line"] for f in json.loads(capsys.readouterr().out)["findings"]]

    assert scan() == [14, 18, 19]
    parsed: list[str] = []
    real = files.parse_file
    monkeypatch.setattr(files, "parse_file", lambda p, data: parsed.append(p) or real(p, data))
    assert scan() == [14, 18, 19] and parsed == []  # served from the cache
    # create_conv now returns a Conv1d: its pairs are gone
    convs = package / "pkg" / "layers" / "convs.py"
    convs.write_text(convs.read_text(encoding="utf-8").replace("nn.Conv2d(a, b, k, padding=k // 2)",
                                                               "nn.Conv1d(a, b, k)").replace(
        "return Conv2dSame(a, b, k)", "return nn.Conv1d(a, b, k)"), encoding="utf-8")
    assert scan() == [18] and parsed == ["pkg/model.py"]


def test_a_parameter_shadowing_the_import_is_not_followed(package: Path) -> None:
    source = MODEL.replace("def __init__(self, c, norm_layer=nn.BatchNorm2d):",
                           "def __init__(self, c, norm_layer=nn.BatchNorm2d, create_conv=None):")
    path = package / "pkg" / "model.py"
    path.write_text(source, encoding="utf-8")
    (block,) = build_module_structure(cst.parse_module(source), str(path)).classes
    assert block.init_bindings["conv2"][0].layer_type.certainty == UNKNOWN  # whatever the caller passes

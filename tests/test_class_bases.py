"""Module classes through bases defined in other files (adopter_codemods/class_bases.py): resolution of relative and
absolute imports, re-exports, aliases, star imports, cycles and missing bases, on throwaway packages; what the
engine then finds, and what stays conservative."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from adopter_codemods import cli, files
from adopter_codemods.api import rewrite_source, scan_source
from adopter_codemods.class_bases import BaseResolver, dependencies_unchanged
from adopter_codemods.provider import build_module_structure

# A dropout -> residual add -> LayerNorm block (ADP005) whose only base is `Base`, imported as the test says.
BLOCK = """\
from torch import nn
{imports}


class Block({base}):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)
        self.ln = nn.LayerNorm(8)

    def forward(self, x, r):
        return self.ln(self.drop(x) + r)
"""
MODULE_BASE = "from torch import nn\n\n\nclass Base(nn.Module):\n    pass\n"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def block(imports: str, base: str = "Base") -> str:
    return BLOCK.format(imports=imports, base=base)


def module_classes(path: Path) -> list[str]:
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    return [c.name for c in build_module_structure(module, str(path)).classes if c.name]


def codes(path: Path) -> list[str]:
    return [f.code for f in scan_source(path.read_text(encoding="utf-8"), ["all"], path=str(path))]


def test_relative_import_from_the_files_own_package(tmp_path: Path) -> None:
    write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": MODULE_BASE, "pkg/model.py": block("from .base import Base")})
    model = tmp_path / "pkg" / "model.py"
    assert module_classes(model) == ["Block"]
    assert codes(model) == ["ADP005"]
    # Without the file's path only names decide: `Base` is unknown, the class is left alone (as before).
    assert scan_source(model.read_text(encoding="utf-8"), ["all"]) == []


def test_two_levels_up_and_a_subpackage(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/layers/__init__.py": "",
            "pkg/layers/core.py": MODULE_BASE,
            "pkg/models/__init__.py": "",
            "pkg/models/net.py": block("from ..layers.core import Base"),
        },
    )
    assert codes(tmp_path / "pkg" / "models" / "net.py") == ["ADP005"]


def test_absolute_import_of_the_files_own_package_not_installed(tmp_path: Path) -> None:
    # src/ is on no search path: the package root is found by walking up through the __init__.py packages.
    write(
        tmp_path,
        {
            "src/mypkg/__init__.py": "",
            "src/mypkg/layers.py": MODULE_BASE,
            "src/mypkg/models/__init__.py": "",
            "src/mypkg/models/net.py": block("from mypkg.layers import Base"),
            "src/mypkg/models/other.py": block("import mypkg.layers as L", base="L.Base"),
        },
    )
    assert importlib.util.find_spec("mypkg") is None
    assert codes(tmp_path / "src" / "mypkg" / "models" / "net.py") == ["ADP005"]
    assert codes(tmp_path / "src" / "mypkg" / "models" / "other.py") == ["ADP005"]


def test_script_beside_its_helper_module(tmp_path: Path) -> None:
    write(tmp_path, {"base.py": MODULE_BASE, "train.py": block("from base import Base")})
    assert codes(tmp_path / "train.py") == ["ADP005"]


def test_installed_package_is_read_not_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    write(
        site,
        {
            "thirdparty/__init__.py": "raise RuntimeError('imported')\nfrom .nn import Base\n",
            "thirdparty/nn.py": "raise RuntimeError('imported')\n" + MODULE_BASE,
        },
    )
    write(tmp_path / "proj", {"a.py": block("from thirdparty.nn import Base"), "b.py": block("from thirdparty import Base")})
    monkeypatch.syspath_prepend(str(site))
    assert codes(tmp_path / "proj" / "a.py") == ["ADP005"]
    assert codes(tmp_path / "proj" / "b.py") == ["ADP005"]  # the re-export in thirdparty/__init__.py
    assert "thirdparty" not in sys.modules and "thirdparty.nn" not in sys.modules


def test_re_exports_aliases_and_star_imports(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "from .impl import Base as PublicBase\n",
            "pkg/impl/__init__.py": "from .core import *\n",
            "pkg/impl/core.py": "from ._real import Real\nBase = Real\n",
            "pkg/impl/_real.py": "import torch\n\n\nclass Real(torch.nn.Module):\n    pass\n",
            "pkg/model.py": block("from . import PublicBase as Base"),
            "pkg/alias.py": block("from .impl import core", base="core.Base"),
        },
    )
    assert codes(tmp_path / "pkg" / "model.py") == ["ADP005"]
    assert codes(tmp_path / "pkg" / "alias.py") == ["ADP005"]


def test_torch_layers_through_torchs_own_sources(tmp_path: Path) -> None:
    """`nn.Embedding` reaches `Module` through torch's sources (star imports in torch/nn/__init__.py), read only."""
    write(tmp_path, {"emb.py": "from torch import nn\n\n\nclass Emb(nn.Embedding):\n    pass\n"})
    assert module_classes(tmp_path / "emb.py") == ["Emb"]


def test_import_cycle_and_deep_chains_end_unresolved(tmp_path: Path) -> None:
    chain = {f"pkg/m{i}.py": f"from .m{i + 1} import Base\n" for i in range(40)}  # longer than MAX_HOPS
    chain["pkg/m40.py"] = MODULE_BASE
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import Base\n",
            "pkg/b.py": "from .a import Base\n",
            "pkg/star1.py": "from .star2 import *\n",
            "pkg/star2.py": "from .star1 import *\n",
            "pkg/cyc.py": block("from .a import Base"),
            "pkg/stars.py": block("from .star1 import Base"),
            "pkg/deep.py": block("from .m0 import Base"),
            "pkg/short.py": block("from .m30 import Base"),
            **chain,
        },
    )
    for name in ("cyc", "stars", "deep"):
        assert module_classes(tmp_path / "pkg" / f"{name}.py") == [], name
    assert module_classes(tmp_path / "pkg" / "short.py") == ["Block"]


def test_class_cycle_across_files(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import B\n\n\nclass A(B):\n    pass\n",
            "pkg/b.py": "from .a import A\n\n\nclass B(A):\n    pass\n",
            "pkg/model.py": block("from .a import A as Base"),
        },
    )
    assert module_classes(tmp_path / "pkg" / "model.py") == []


@pytest.mark.parametrize(
    ("files", "imports", "expected"),
    [
        ({}, "from notinstalled.layers import Base", []),  # unknown third-party base: left alone
        ({}, "from notinstalled.modeling_utils import MyPreTrainedModel as Base", ["Block"]),  # named as before
        ({}, "from notinstalled.modeling_layers import GradientCheckpointingLayer as Base", ["Block"]),
        # Lightning not installed: its LightningModule, under either package name, as the others name it.
        ({}, "from pytorch_lightning import LightningModule as Base", ["Block"]),
        ({}, "from lightning.pytorch.core.module import LightningModule as Base", ["Block"]),
        ({}, "from notlightning import LightningModule as Base", []),
        ({"pkg/base.py": "class Base:\n    pass\n"}, "from .base import Base", []),  # found, not a module
        ({"pkg/base.py": "class Base(\n"}, "from .base import Base", []),  # does not parse
        ({"pkg/base.py": "def make():\n    pass\nBase = make()\n"}, "from .base import Base", []),  # computed
        ({"pkg/base.py": "x = 1\n"}, "from .base import Base", []),  # the name is not there
        # Found but not a module, although named like one: what the class is decides.
        ({"pkg/base.py": "class Base:\n    pass\n"}, "from .base import Base as FooPreTrainedModel", []),
    ],
)
def test_unresolved_or_non_module_bases_stay_conservative(
    tmp_path: Path, files: dict[str, str], imports: str, expected: list[str]
) -> None:
    base = imports.rsplit(" ", 1)[-1]
    write(tmp_path, {"pkg/__init__.py": "", **files, "pkg/model.py": block(imports, base=base)})
    assert module_classes(tmp_path / "pkg" / "model.py") == expected


def test_missing_path_or_string_source_decides_by_name(tmp_path: Path) -> None:
    write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": MODULE_BASE})
    source = block("from .base import Base")
    assert scan_source(source, ["all"], path=str(tmp_path / "pkg" / "missing.py")) == []
    assert scan_source(source, ["all"], path="<string>") == []
    assert [f.code for f in scan_source(source, ["all"], path=str(tmp_path / "pkg" / "base.py"))] == ["ADP005"]


def test_layers_the_other_files_base_uses_are_not_removed_nor_relied_on(tmp_path: Path) -> None:
    """The base's methods run on the class's instances: the ADP005 form that deletes `self.drop`, which the base
    reads, gives way to the form that keeps the modules; the base binding `self.ln` (which either form relies on
    being a LayerNorm) leaves no rewrite; a base touching neither keeps the finding."""
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/reads.py": MODULE_BASE + "\n    def rate(self):\n        return self.drop.p\n",
            "pkg/binds.py": MODULE_BASE + "\n    def reset(self):\n        setattr(self, 'ln', None)\n",
            "pkg/other.py": MODULE_BASE + "\n    def rate(self):\n        return self.dropout.p\n",
            "pkg/a.py": block("from .reads import Base"),
            "pkg/b.py": block("from .binds import Base"),
            "pkg/c.py": block("from .other import Base"),
        },
    )
    assert codes(tmp_path / "pkg" / "a.py") == ["ADP005"]
    assert "dropout_add_layer_norm_module(" in rewrite_source(
        (tmp_path / "pkg" / "a.py").read_text(encoding="utf-8"), ["ADP005"], path=str(tmp_path / "pkg" / "a.py")
    ).code
    assert codes(tmp_path / "pkg" / "b.py") == []
    assert codes(tmp_path / "pkg" / "c.py") == ["ADP005"]


def test_init_inherited_from_another_file_is_not_read(tmp_path: Path) -> None:
    """Limitation (docs/ENGINE.md): `__init__` and helpers of a base in another file are not walked, so layers bound
    there are unknown and nothing that needs them matches."""
    base = MODULE_BASE.replace(
        "    pass\n",
        "    def __init__(self):\n        super().__init__()\n        self.drop = nn.Dropout(0.1)\n"
        "        self.ln = nn.LayerNorm(8)\n",
    )
    child = "from .base import Base\n\n\nclass Block(Base):\n    def forward(self, x, r):\n        return self.ln(self.drop(x) + r)\n"
    write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": base, "pkg/model.py": child})
    assert module_classes(tmp_path / "pkg" / "model.py") == ["Block"]
    assert codes(tmp_path / "pkg" / "model.py") == []


def test_rewrite_through_a_base_in_another_file_runs_the_same(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from adopter_kernels.equivalence import compare_models, load_source_as_module

    write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": MODULE_BASE, "pkg/model.py": block("from .base import Base")})
    path = tmp_path / "pkg" / "model.py"
    result = rewrite_source(path.read_text(encoding="utf-8"), ["all"], path=str(path))
    assert [f.code for f in result.findings] == ["ADP005"] and "FusedDropoutAddLayerNorm" in result.code
    assert rewrite_source(result.code, ["all"], path=str(path)).code == result.code  # a second run changes nothing
    sys.path.insert(0, str(tmp_path))
    try:
        import pkg.model as original  # the package is importable only for executing it here

        fused = load_source_as_module(result.code, "pkg.model_adopted", package="pkg")
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            torch.manual_seed(0)
            vanilla = original.Block()
            rewritten = fused.Block()
            x, r = torch.randn(3, 5, 8), torch.randn(3, 5, 8)
            compare_models(vanilla, rewritten, (x, r), {}, rtol=1e-9, atol=1e-9).raise_if_failed()
        finally:
            torch.set_default_dtype(previous)
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("pkg", "pkg.base", "pkg.model", "pkg.model_adopted"):
            sys.modules.pop(name, None)


def test_front_ends_pass_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from libcst.codemod import CodemodContext, TransformSuccess, transform_module

    from adopter_codemods import AdoptAll

    write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": MODULE_BASE, "pkg/model.py": block("from .base import Base")})
    monkeypatch.chdir(tmp_path)
    model = Path("pkg") / "model.py"
    source = model.read_text(encoding="utf-8")
    # LibCST codemod: the file name from the context.
    result = transform_module(AdoptAll(CodemodContext(filename=str(model))), source)
    assert isinstance(result, TransformSuccess) and "FusedDropoutAddLayerNorm" in result.code
    # scan / rewrite
    assert cli.main(["scan", "--rules", "all", "--format", "json", "--no-progress", "--no-cache", "pkg"]) == 1
    assert [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["ADP005"]
    assert cli.main(["rewrite", "--rules", "all", "--no-progress", "pkg"]) == 0
    assert "FusedDropoutAddLayerNorm" in model.read_text(encoding="utf-8")


def test_fixit_rule_passes_the_path(tmp_path: Path) -> None:
    from fixit.engine import LintRunner
    from fixit.ftypes import Config

    from adopter_codemods import lint

    write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": MODULE_BASE, "pkg/model.py": block("from .base import Base")})
    path = tmp_path / "pkg" / "model.py"
    runner = LintRunner(path, path.read_bytes())
    violations = list(runner.collect_violations([lint.FuseDropoutLN()], Config(path=path)))
    assert [v.message.split()[0] for v in violations] == ["ADP005"]


def test_scan_cache_misses_when_a_base_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": MODULE_BASE, "pkg/model.py": block("from .base import Base")})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADOPTER_CACHE_DIR", raising=False)

    def scan() -> list[str]:
        cli.main(["scan", "--rules", "all", "--format", "json", "--no-progress", "pkg/model.py"])
        return [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]]

    assert scan() == ["ADP005"]
    parsed: list[str] = []
    real = files.parse_file
    monkeypatch.setattr(files, "parse_file", lambda p, data: parsed.append(p) or real(p, data))
    assert scan() == ["ADP005"] and parsed == []  # served from the cache
    (tmp_path / "pkg" / "base.py").write_text("class Base:\n    pass\n", encoding="utf-8")  # no longer a module
    assert scan() == [] and parsed == ["pkg/model.py"]


def test_dependencies_record(tmp_path: Path) -> None:
    write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": MODULE_BASE, "pkg/model.py": block("from .base import Base")})
    model, base = tmp_path / "pkg" / "model.py", tmp_path / "pkg" / "base.py"
    resolver = BaseResolver(str(model))
    assert resolver.base_is_module(".base.Base")[0]
    record = resolver.dependencies()
    assert str(base) in [f[0] for f in record["files"]]  # type: ignore[index, union-attr]
    assert dependencies_unchanged(record, str(model))
    assert not dependencies_unchanged(record, str(tmp_path / "pkg" / "base.py"))  # another file
    (tmp_path / "pkg" / "base.py").write_text(MODULE_BASE + "# edited\n", encoding="utf-8")
    assert not dependencies_unchanged(record, str(model))
    assert BaseResolver(str(model)).dependencies() == {}  # nothing looked up yet
    assert dependencies_unchanged({}, str(model))
    assert not dependencies_unchanged({"origin": 1}, str(model))  # malformed


# The analysed file's own `from x import *` (fastai/tsai: `from ..imports import *` brings `Module`, `nn`, `F`).
STAR_IMPORTS = "import torch\nimport torch.nn as nn\nfrom .layers import *\n"
STAR_LAYERS = "from torch import nn\n\n\nclass Module(nn.Module):\n    pass\n"
# BLOCK with nothing imported but the star: `Module` and `nn` come through it.
STAR_MODEL = block("", base="Module").replace("from torch import nn\n", "from .imports import *\n")


@pytest.mark.parametrize(
    ("imports", "model", "expected"),
    [
        # `Module` through two star imports, `nn` through one: the class and its layers are known.
        (STAR_IMPORTS, STAR_MODEL, ["ADP005"]),
        # `__all__` decides what a star import takes, and leaving a name out hides it.
        (STAR_IMPORTS + "__all__ = ['nn', 'Module']\n", STAR_MODEL, ["ADP005"]),
        (STAR_IMPORTS + "__all__ = ['Module']\n", STAR_MODEL, []),
        # A computed `__all__`: what it holds cannot be told, so nothing is resolved through it.
        (STAR_IMPORTS + "__all__ = ['nn'] + ['Module']\n", STAR_MODEL, []),
        # The file's own binding wins over the star import's, and so does the function's own local.
        (STAR_IMPORTS, STAR_MODEL.replace("class Block", "def Module():\n    pass\n\n\nclass Block"), []),
        (STAR_IMPORTS, STAR_MODEL.replace("def __init__(self):", "def __init__(self, nn=None):"), []),
    ],
)
def test_star_imports_of_the_analysed_file(tmp_path: Path, imports: str, model: str, expected: list[str]) -> None:
    write(tmp_path, {"pkg/__init__.py": "", "pkg/layers.py": STAR_LAYERS, "pkg/imports.py": imports,
                     "pkg/model.py": model})
    assert codes(tmp_path / "pkg" / "model.py") == expected

"""A rewrite never makes a function read a name nobody defines.

The fused call's arguments are written where it goes. A value computed inside a helper method has no name there:
written as it reads in the helper (``relative_position_bias``, ``x.reshape(B, h * w, C * r * r)``), it is a name
error at run time, or another variable of the same name. Every file of torchvision and timm (installed by
`make model-zoo`) is rewritten with every rule, and each function of the result may read no undefined name the
original did not already read.
"""

from __future__ import annotations

import ast
import builtins
import symtable
import textwrap
from pathlib import Path
from typing import Optional

from adopter_codemods.api import rewrite_source
from model_zoo import VISION_DIR, require

_ALWAYS = set(dir(builtins)) | {"__file__", "__name__", "__class__", "__spec__", "__path__", "__builtins__"}


def undefined_names(source: str, path: str = "<string>") -> Optional[set[tuple[str, str]]]:
    """(function, name) for each name a function reads that neither it, an enclosing function, the module nor the
    builtins define; None for a module with a star import (what it defines is unknown here)."""
    if any(isinstance(n, ast.ImportFrom) and n.names[0].name == "*" for n in ast.walk(ast.parse(source))):
        return None
    top = symtable.symtable(source, path, "exec")
    symbols = top.get_symbols()
    defined = {s.get_name() for s in symbols if s.is_assigned() or s.is_imported() or s.is_namespace()} | _ALWAYS
    out: set[tuple[str, str]] = set()

    def visit(table: symtable.SymbolTable, where: str) -> None:
        for child in table.get_children():
            name = f"{where}.{child.get_name()}" if where else child.get_name()
            if child.get_type() == "function":
                out.update(
                    (name, s.get_name())
                    for s in child.get_symbols()
                    if s.is_referenced() and s.is_global() and not s.is_declared_global() and s.get_name() not in defined
                )
            visit(child, name)

    visit(top, "")
    return out


def test_undefined_names_sees_a_helper_local_written_in_forward() -> None:
    original = textwrap.dedent(
        """\
        import torch

        class M(torch.nn.Module):
            def bias(self):
                b = self.table * 2
                return b

            def forward(self, x):
                return x + self.bias() + undefined_before
        """
    )
    assert undefined_names(original) == {("M.forward", "undefined_before")}
    rewritten = original.replace("x + self.bias()", "x + b")
    assert undefined_names(rewritten) == {("M.forward", "undefined_before"), ("M.forward", "b")}
    assert undefined_names("from torch import *\n") is None


def test_rewritten_vision_sources_define_every_name_they_read() -> None:
    require(VISION_DIR)
    new_names: dict[str, list[tuple[str, str]]] = {}
    rewritten = 0
    for path in sorted(Path(VISION_DIR).glob("*/**/*.py")):
        source = path.read_text(encoding="utf-8")
        if "Module" not in source:
            continue
        code = rewrite_source(source, ["all"], path=str(path)).code
        if code == source:
            continue
        rewritten += 1
        before, after = undefined_names(source, str(path)), undefined_names(code, str(path))
        if before is not None and after is not None and after - before:
            new_names[str(path.relative_to(VISION_DIR))] = sorted(after - before)
    assert rewritten >= 90  # torchvision and timm: about a hundred files change
    assert not new_names

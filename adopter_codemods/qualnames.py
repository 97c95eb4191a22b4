"""Qualified names from a module-level import table.

LibCST's ``QualifiedNameProvider`` builds full scope analysis, which costs several times the parse on large
modeling files (docs/DESIGN.md §5). Model code names layers through a handful of module-level imports
(``import torch.nn as nn``, ``from torch.nn import functional as F``, ``from ...activations import ACT2FN``), so a
table of those imports plus the classes defined in the file is all the resolution this tool needs.

Names a ``from x import *`` may bind are looked up in ``x`` on demand (``ImportTable.star_lookup``, set where other
files can be read). A name imported through a relative import keeps its leading dots (``...activations.ACT2FN``);
patterns match it by dotted suffix (see :func:`qualname_matches`).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

import libcst as cst


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while type(node) is cst.Attribute:  # exact types: isinstance on LibCST's ABCs is slow (hot path)
        parts.append(node.attr.value)  # type: ignore[attr-defined]
        node = node.value  # type: ignore[attr-defined]
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def ast_dotted_name(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for an ``ast`` Name/Attribute chain (the ``ast`` twin of ``dotted_name``), else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _module_name(node: cst.BaseExpression) -> str:
    name = dotted_name(node)
    assert name is not None  # import targets are always dotted names
    return name


@dataclass
class ImportTable:
    """Maps local names bound at module level to qualified names."""

    names: dict[str, str] = field(default_factory=dict)
    local_classes: set[str] = field(default_factory=set)
    # `from x import *`: the modules (as written, relative ones with their dots), and the names the module binds
    # otherwise at its top level (functions, assignments), which no star import rebinds for the reader.
    star_modules: list[str] = field(default_factory=list)
    top_level: set[str] = field(default_factory=set)
    # What a name no import or class binds names through the star imports (the qualified name, None: not found or
    # not known): set by the front-end that can read other files (`class_bases.BaseResolver.star_export`).
    star_lookup: Optional[Callable[[str], Optional[str]]] = None
    _star_names: dict[str, Optional[str]] = field(default_factory=dict)

    @classmethod
    def from_module(cls, module: cst.Module) -> "ImportTable":
        table = cls()
        for stmt in module.body:
            table._visit_top_level(stmt)
        return table

    def _visit_top_level(self, stmt: cst.CSTNode) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    self.add_import(small)
                elif isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                    self.top_level.update(n.value for t in targets for n in _bound_names(t))
        elif isinstance(stmt, cst.ClassDef):
            self.local_classes.add(stmt.name.value)
        elif isinstance(stmt, cst.FunctionDef):
            self.top_level.add(stmt.name.value)
        elif isinstance(stmt, (cst.If, cst.Try)):
            # `if TYPE_CHECKING:` / `try: import x except ImportError:` blocks hold imports too.
            for block in _sub_blocks(stmt):
                for inner in block:
                    self._visit_top_level(inner)

    def add_import(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = _module_name(alias.name)
                if alias.asname is not None:
                    self.names[_module_name(alias.asname.name)] = full
                else:
                    # `import torch.nn` binds `torch`; attribute access then spells the rest.
                    head = full.split(".")[0]
                    self.names.setdefault(head, head)
            return
        module = _module_name(node.module) if node.module is not None else ""
        prefix = "." * len(node.relative) + module
        if isinstance(node.names, cst.ImportStar):
            self.star_modules.append(prefix)
            return
        for alias in node.names:
            name = _module_name(alias.name)
            local = _module_name(alias.asname.name) if alias.asname is not None else name
            if prefix.endswith("."):
                self.names[local] = prefix + name
            else:
                self.names[local] = f"{prefix}.{name}" if prefix else name

    def resolve(self, node: cst.BaseExpression) -> Optional[str]:
        """Qualified name of a Name/Attribute chain rooted at an imported or locally defined name."""
        root = node
        while type(root) is cst.Attribute:  # the root first: most chains start at a local (`x.shape`), no string
            root = root.value  # type: ignore[attr-defined]
        if type(root) is not cst.Name:
            return None
        head = root.value  # type: ignore[attr-defined]
        base = self.names.get(head)
        if base is None:
            if head in self.local_classes:
                base = head
            elif self.star_lookup is None or head in self.top_level:
                return None
            else:
                base = self._star_name(head)
                if base is None:
                    return None
        if root is node:
            return base
        name = dotted_name(node)
        assert name is not None
        return base + name[len(head) :]


    def _star_name(self, head: str) -> Optional[str]:
        if head not in self._star_names:
            assert self.star_lookup is not None
            self._star_names[head] = self.star_lookup(head)
        return self._star_names[head]


def _bound_names(target: cst.BaseExpression) -> list[cst.Name]:
    """The names an assignment target binds (`a`, `a, *b`; not `a.x`, `a[i]`)."""
    if type(target) is cst.Name:
        return [target]  # type: ignore[list-item]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in _bound_names(el.value)]
    if isinstance(target, cst.StarredElement):
        return _bound_names(target.value)
    return []


def _sub_blocks(stmt: cst.CSTNode) -> list[list[cst.CSTNode]]:
    blocks: list[list[cst.CSTNode]] = []
    if isinstance(stmt, cst.If):
        blocks.append(list(stmt.body.body))
        if stmt.orelse is not None:
            orelse = stmt.orelse
            if isinstance(orelse, cst.If):
                blocks.extend(_sub_blocks(orelse))
            else:
                blocks.append(list(orelse.body.body))
    elif isinstance(stmt, cst.Try):
        blocks.append(list(stmt.body.body))
        blocks.extend(list(h.body.body) for h in stmt.handlers)
        if stmt.orelse is not None:
            blocks.append(list(stmt.orelse.body.body))
    return blocks


# Asked for the same few (pattern, name) pairs at every node of every path a rule searches.
@functools.lru_cache(maxsize=16384)
def qualname_matches(pattern: str, concrete: str) -> bool:
    """Whether a concrete qualified name satisfies a pattern name.

    ``*.Name`` matches ``Name`` from any module, ``*.*`` any name; a relative or file-local concrete name matches a
    pattern that ends with it on a dotted boundary (``...activations.ACT2FN`` matches
    ``transformers.activations.ACT2FN``), but never a pattern in torch: a class of the file or of its package is not
    torch's, whatever its name (``class LayerNorm(nn.Module)``, ``from .nn import LayerNorm``).
    ``torch.nn.modules.dropout.Dropout``-style spellings are normalised by :data:`TORCH_ALIASES` first.
    """
    if pattern == "*.*":  # any name: the rule's guard decides (ADP011 judges the instantiated class's forward)
        return True
    concrete = canonical_torch_name(concrete)
    if pattern.startswith("*."):
        return concrete == pattern[2:] or concrete.endswith(pattern[1:])
    if concrete == pattern:
        return True
    stripped = concrete.lstrip(".")
    if (stripped != concrete or "." not in concrete) and not pattern.startswith("torch."):
        return pattern.endswith("." + stripped)
    return False


# Public re-exports that resolve to the same object; canonical spelling first.
TORCH_ALIASES: dict[str, str] = {
    "torch.nn.modules.dropout.Dropout": "torch.nn.Dropout",
    "torch.nn.modules.normalization.LayerNorm": "torch.nn.LayerNorm",
    "torch.nn.modules.linear.Linear": "torch.nn.Linear",
    "torch.nn.modules.conv.Conv2d": "torch.nn.Conv2d",
    "torch.nn.modules.batchnorm.BatchNorm2d": "torch.nn.BatchNorm2d",
    "torch.nn.modules.batchnorm.BatchNorm1d": "torch.nn.BatchNorm1d",
    "torch.nn.modules.container.Sequential": "torch.nn.Sequential",
    "torch.nn.modules.module.Module": "torch.nn.Module",
}


def canonical_torch_name(name: str) -> str:
    return TORCH_ALIASES.get(name, name)

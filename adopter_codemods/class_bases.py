"""Base classes defined in other files: whether a class reaches ``torch.nn.Module`` through them.

Class discovery (``provider.build_module_structure``) follows bases inside the file on its own; a base imported
from another file (transformers 5.x's ``GradientCheckpointingLayer``, a user's ``from mypkg.layers import Block``)
is resolved here, statically: the defining file is located with ``importlib.machinery.PathFinder`` one package level
at a time (no parent package is imported, nor the file: nothing is executed) and read with :mod:`ast` (a base, an
import table and the ``self.<attr>`` names of a class is all it needs; ``ast`` parses a large modeling file in a
fraction of LibCST's time). Where the name is looked for:

* a relative import (``from ..modeling_layers import X``): from the importing file's own directory;
* an absolute one: first under the root of the importing file's own package (its directory, walked up through
  ``__init__.py`` packages), then on ``sys.path``: the installed packages' sources.

Re-exports (``from .x import Y`` in an ``__init__.py``, also under ``if TYPE_CHECKING:``/``try:``), ``import ... as``
aliases, module-level ``Alias = Name`` assignments and ``from x import *`` are followed, at most :data:`MAX_HOPS`
deep; a cycle ends the search. A class is a module class when one of its bases is ``torch.nn.Module`` (or
``Sequential``/``ModuleList``/``ModuleDict``: by qualified name, so without torch installed too) or a resolved
class that is one. A base that cannot be resolved (not installed, a C extension, a file that does not parse, a
computed base) counts only when its name says so, as before this module existed: ``*PreTrainedModel``,
transformers' ``modeling_layers.GradientCheckpointingLayer`` and Lightning's ``LightningModule``; any other
unresolved base is not a module, so the class is left alone (no finding, no rewrite).

Parsed files are kept per process, keyed by path and checked against its modification time and size on each
use; each :class:`BaseResolver` (one per analysed file) records the look-ups and files it used
(:meth:`BaseResolver.dependencies`), so ``scan``'s cache can tell when a result depends on a file that changed.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from .qualnames import ast_dotted_name, canonical_torch_name, qualname_matches

MODULE_BASES = ("torch.nn.Module", "torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict")
MAX_HOPS = 32  # imports, re-exports and aliases followed for one name, and bases deep (real chains: a few)
MAX_CLASSES = 256  # classes of other files whose `self` attributes one class collects


def is_module_base_name(qualname: str) -> bool:
    """Whether a qualified name is one of torch's module base classes (any spelling of it)."""
    qualname = canonical_torch_name(qualname)
    return any(qualname_matches(base, qualname) for base in MODULE_BASES)


def is_module_by_name(qualname: str) -> bool:
    """The names that count as module bases without being resolved (the rule for a base found nowhere)."""
    return (
        is_module_base_name(qualname)
        or qualname.endswith("PreTrainedModel")
        # transformers >= 4.52 derives decoder layers from modeling_layers.GradientCheckpointingLayer (a Module).
        or qualname.endswith("modeling_layers.GradientCheckpointingLayer")
        # Lightning's LightningModule (an nn.Module), where models often define their layers: any of its spellings.
        or (qualname.startswith(("pytorch_lightning.", "lightning.")) and qualname.endswith(".LightningModule"))
    )


@dataclass
class ClassSummary:
    node: ast.ClassDef
    bases: tuple[Optional[str], ...]  # dotted base expressions; None for any other expression (`Generic[T]`)
    _attributes: Optional[tuple[frozenset[str], frozenset[str]]] = None

    def attributes(self) -> tuple[frozenset[str], frozenset[str]]:
        """``self.<attr>`` names the class body reads and binds (also through ``setattr(self, "name", ...)``)."""
        if self._attributes is None:
            reads: set[str] = set()
            stores: set[str] = set()
            for node in ast.walk(self.node):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    (reads if isinstance(node.ctx, ast.Load) else stores).add(node.attr)
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("setattr", "delattr")
                    and node.args
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id == "self"
                ):
                    # A computed name is not counted: transformers' PreTrainedModel has them in model-surgery
                    # methods the user calls (`set_input_embeddings`), which would otherwise veto every class.
                    name = node.args[1] if len(node.args) > 1 else None
                    if isinstance(name, ast.Constant) and isinstance(name.value, str):
                        stores.add(name.value)
            self._attributes = (frozenset(reads), frozenset(stores))
        return self._attributes

    def defined(self) -> frozenset[str]:
        """Names the class body defines as functions (methods, properties) or binds to a call's result
        (``x = property(f)``): reading such an attribute of an instance may run code."""
        names: set[str] = set()
        for stmt in self.node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(stmt.name)
            elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        return frozenset(names)


@dataclass
class FileSummary:
    """What resolution needs of one file: its top-level names and classes."""

    path: str
    module_name: str  # dotted name from the __init__.py packages above it
    # Top-level name -> ("class", name) | ("function", name) | ("value", name) | ("import", qualified name,
    # relative ones with their leading dots) | ("alias", dotted name in this file); the last binding wins.
    bindings: dict[str, tuple[str, str]] = field(default_factory=dict)
    classes: dict[str, ClassSummary] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # read by factory_types
    values: dict[str, ast.expr] = field(default_factory=dict)  # `NAME = <not a dotted name>` (a dict of layer types)
    star_imports: list[str] = field(default_factory=list)  # module names of `from x import *`
    ambiguous: set[str] = field(default_factory=set)  # names bound more than once, to different things


def _module_name(path: Path) -> str:
    directory = path.parent
    parts = [] if path.name == "__init__.py" else [path.stem]
    while os.path.isfile(directory / "__init__.py") and directory.parent != directory:
        parts.append(directory.name)
        directory = directory.parent
    return ".".join(reversed(parts))


def _package_root(path: Path) -> Path:
    """The directory above the outermost ``__init__.py`` package holding `path` (its own directory if none)."""
    directory = path.parent
    while os.path.isfile(directory / "__init__.py") and directory.parent != directory:
        directory = directory.parent
    return directory


def summarize(path: Path, source: bytes) -> FileSummary:
    """A file's top-level bindings and classes; raises SyntaxError/ValueError for source ``ast`` rejects."""
    tree = ast.parse(source, filename=str(path))
    summary = FileSummary(str(path), _module_name(path))
    _visit(summary, tree.body)
    return summary


def _bind(summary: FileSummary, name: str, binding: tuple[str, str]) -> None:
    previous = summary.bindings.get(name)
    if previous is not None and (previous != binding or binding[0] in ("function", "value")):
        summary.ambiguous.add(name)  # which binding holds at run time may depend on the path taken
    summary.bindings[name] = binding


def _visit(summary: FileSummary, body: Sequence[ast.stmt]) -> None:
    for stmt in body:
        if isinstance(stmt, ast.ClassDef):
            _bind(summary, stmt.name, ("class", stmt.name))
            summary.classes[stmt.name] = ClassSummary(stmt, tuple(ast_dotted_name(b) for b in stmt.bases))
        elif isinstance(stmt, ast.FunctionDef):
            _bind(summary, stmt.name, ("function", stmt.name))
            summary.functions[stmt.name] = stmt
        elif isinstance(stmt, ast.AsyncFunctionDef):
            _bind(summary, stmt.name, ("value", stmt.name))  # no value recorded: calling it builds no known layer
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname is not None:
                    _bind(summary, alias.asname, ("import", alias.name))
                else:
                    head = alias.name.split(".")[0]  # `import a.b` binds `a`
                    _bind(summary, head, ("import", head))
        elif isinstance(stmt, ast.ImportFrom):
            prefix = "." * stmt.level + (stmt.module or "")
            for alias in stmt.names:
                if alias.name == "*":
                    summary.star_imports.append(prefix)
                    continue
                joined = prefix + alias.name if prefix.endswith(".") or not prefix else f"{prefix}.{alias.name}"
                _bind(summary, alias.asname or alias.name, ("import", joined))
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = ast_dotted_name(stmt.value)
            name = stmt.targets[0].id
            if value is not None:
                _bind(summary, name, ("alias", value))
            else:
                _bind(summary, name, ("value", name))
                summary.values[name] = stmt.value
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            summary.ambiguous.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(stmt, ast.If):
            # `if TYPE_CHECKING:` re-exports (transformers' lazy __init__) and version switches: both arms.
            _visit(summary, stmt.body)
            _visit(summary, stmt.orelse)
        elif isinstance(stmt, ast.Try):
            _visit(summary, stmt.body)
            for handler in stmt.handlers:
                _visit(summary, handler.body)
            _visit(summary, stmt.orelse)


# Path -> (mtime_ns, size, summary or None when unreadable/unparsable): files are parsed once per process.
_SUMMARIES: dict[str, tuple[int, int, Optional[FileSummary]]] = {}
# (module name, directories) -> where it was found: looked up once per process (the import system's own
# directory caches make each look-up cost tens of microseconds per directory); a module created or removed while
# a process runs is seen by the next one.
_LOCATED: dict[tuple[str, tuple[str, ...]], Optional["Located"]] = {}


@dataclass(frozen=True)
class ClassRef:
    """A class found in a file."""

    path: str
    name: str


@dataclass(frozen=True)
class Definition:
    """What a name is bound to at the top level of a file: a class, a function, or another value."""

    path: str
    name: str
    kind: str  # "class" | "function" | "value"


@dataclass(frozen=True)
class Located:
    """A module found by a look-up: its file (None for a namespace package) and, for a package, where its
    submodules are."""

    origin: Optional[str]
    submodules: Optional[tuple[str, ...]]


class BaseResolver:
    """Resolves the bases of one file's classes; records what it read (:meth:`dependencies`).

    `path` is the analysed file (None: source without a file, then only names decide, as for an unresolved base).
    """

    def __init__(self, path: Optional[str]) -> None:
        self.origin: Optional[Path] = _existing_file(path)
        self._search_path: Optional[list[str]] = None
        self._lookups: dict[tuple[str, tuple[str, ...]], Optional[Located]] = {}
        self._files: dict[str, Optional[tuple[int, int]]] = {}
        self._verdicts: dict[ClassRef, bool] = {}
        self._resolved: dict[tuple[str, str], Optional[Definition]] = {}
        self._attributes: dict[ClassRef, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {}

    # ------------------------------------------------------------------ public
    def resolve(self, qualname: str) -> Optional[ClassRef]:
        """The class an imported name of the analysed file (``...modeling_layers.X``, ``mypkg.layers.Block``)
        names, or None when it cannot be found."""
        found = self.definition(qualname)
        return ClassRef(found.path, found.name) if found is not None and found.kind == "class" else None

    def definition(self, qualname: str, importer: Optional[str] = None) -> Optional[Definition]:
        """What a name imported by `importer` (default: the analysed file) is defined as: a class, a function or
        another value bound at the top level of the file defining it; None when it cannot be found."""
        importer = importer if importer is not None else (str(self.origin) if self.origin is not None else None)
        if importer is None:
            return None
        return self._resolve_qualified(qualname, importer, MAX_HOPS, frozenset())

    def lookup(self, summary: FileSummary, dotted: str) -> Optional[Definition]:
        """What a dotted name used in `summary`'s file (``nn.Conv2d``, ``create_conv2d``) is defined as."""
        return self._define(summary, dotted.split("."), MAX_HOPS, frozenset())

    def file(self, path: str) -> Optional[FileSummary]:
        """The summary of a file, recorded as read (:meth:`dependencies`); None when it does not parse."""
        return self._summary(path)

    @staticmethod
    def qualified(summary: FileSummary, dotted: str) -> Optional[str]:
        """A dotted name of `summary`'s file as an absolute qualified name, when its head is imported."""
        return BaseResolver._qualified(summary, dotted)

    def star_export(self, stars: Sequence[str], name: str) -> Optional[str]:
        """The qualified name `name` has in the analysed file when its own `from x import *` (`stars`, in order)
        bind it: the last module exporting it decides. None when none does, or when one could (a module not found,
        an `__all__` that is computed, a name bound twice) and which one cannot be told."""
        if self.origin is None:
            return None
        for star in reversed(stars):
            found, qualname = self._exported(star, str(self.origin), name, MAX_HOPS, frozenset())
            if found is not False:
                return qualname if found else None
        return None

    def _exported(
        self, module: str, importer: str, name: str, hops: int, active: frozenset
    ) -> tuple[Optional[bool], Optional[str]]:
        """Whether `from <module> import *` in `importer` binds `name` (True, with its qualified name; False; None:
        cannot tell)."""
        summary = self._module_summary(module, importer)
        if summary is None or hops <= 0 or summary.path in active:
            return None, None
        active = active | {summary.path}
        if "__all__" in summary.bindings:
            exported = _all_names(summary)
            if exported is None:
                return None, None
            if name not in exported:
                return False, None
        elif name.startswith("_"):
            return False, None
        if name in summary.ambiguous:
            return None, None
        binding = summary.bindings.get(name)
        if binding is None:
            for star in reversed(summary.star_imports):
                found, qualname = self._exported(star, summary.path, name, hops - 1, active)
                if found is not False:
                    return found, qualname
            return False, None
        if binding[0] == "import":
            qualname = _absolute(binding[1], summary)
        elif binding[0] == "alias":
            qualname = self._qualified(summary, binding[1])
        else:  # a class, function or value of that file
            qualname = f"{summary.module_name}.{name}" if summary.module_name else None
        return (True, qualname) if qualname is not None else (None, None)

    def _module_summary(self, qualname: str, importer: str) -> Optional[FileSummary]:
        """The file of the module `qualname` (as written in an import of `importer`), read; None when not found."""
        parts, index, _, current = self._locate_modules(qualname, importer)
        return self._summary(current) if index == len(parts) and current is not None else None

    def base_is_module(self, qualname: str) -> tuple[bool, Optional[ClassRef]]:
        """Whether an imported base makes a class a module class, and the class it resolved to (None: not
        resolved, or one of torch's module bases named as such)."""
        if is_module_base_name(qualname):
            return True, None
        ref = self.resolve(qualname)
        if ref is None:
            return is_module_by_name(qualname), None
        return self._is_module(ref, frozenset()), ref

    def class_and_bases(self, ref: ClassRef) -> Optional[tuple[ast.ClassDef, list[tuple[str, Optional[ClassRef]]]]]:
        """A class of another file (None: its file cannot be read any more, or it is one of torch's module bases),
        with its bases in order: each written as an absolute qualified name where it is imported (as in the file
        otherwise) and the class it resolves to (None: not found, a computed base, or torch's own base named as
        such)."""
        found = self._class(ref)
        if found is None or self._is_torch_base(found[0], ref):
            return None
        summary, info = found
        bases: list[tuple[str, Optional[ClassRef]]] = []
        for base in info.bases:
            if base is None:
                bases.append(("", None))
                continue
            qualname = self._qualified(summary, base) or base
            target = None if is_module_base_name(qualname) else self._lookup(summary, base.split("."), MAX_HOPS, frozenset())
            target_class = self._class(target) if target is not None else None
            if target is not None and target_class is not None and self._is_torch_base(target_class[0], target):
                qualname, target = f"{target_class[0].module_name}.{target.name}", None  # torch's sources
            bases.append((qualname, target))
        return info.node, bases

    def attributes(self, refs: Sequence[ClassRef]) -> tuple[frozenset[str], frozenset[str]]:
        """``self`` attribute names read and bound by these classes of other files and every base they reach,
        torch's ``Module`` aside (the code of those methods runs on the analysed class's instances too)."""
        reads: set[str] = set()
        stores: set[str] = set()
        for ref in refs:
            ref_reads, ref_stores, _ = self._ancestry(ref)
            reads |= ref_reads
            stores |= ref_stores
        return frozenset(reads), frozenset(stores)

    def methods(self, refs: Sequence[ClassRef]) -> frozenset[str]:
        """Names these classes of other files and every base they reach (torch's ``Module`` aside) define as
        methods or properties (`ClassSummary.defined`)."""
        return frozenset().union(*(self._ancestry(ref)[2] for ref in refs))

    def _ancestry(self, start: ClassRef) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        """The ``self`` attributes read, bound, and defined as methods or properties in `start` and its bases."""
        if start in self._attributes:
            return self._attributes[start]
        reads: set[str] = set()
        stores: set[str] = set()
        defined: set[str] = set()
        seen: set[ClassRef] = set()
        todo = [start]
        while todo and len(seen) < MAX_CLASSES:
            ref = todo.pop()
            found = self._class(ref)
            if ref in seen or found is None or self._is_torch_base(found[0], ref):
                continue
            seen.add(ref)
            class_reads, class_stores = found[1].attributes()
            reads |= class_reads
            stores |= class_stores
            defined |= found[1].defined()
            bases = (self._lookup(found[0], b.split("."), MAX_HOPS, frozenset()) for b in found[1].bases if b)
            todo.extend(b for b in bases if b is not None)
        result = self._attributes[start] = (frozenset(reads), frozenset(stores), frozenset(defined))
        return result

    def dependencies(self) -> dict[str, object]:
        """What the results depend on besides the analysed file's text, as JSON (see :func:`dependencies_unchanged`):
        empty when no base had to be looked up in another file."""
        if not self._lookups:
            return {}
        return {
            "origin": str(self.origin),
            "search_path": self.search_path(),
            "lookups": sorted([name, list(dirs), _located_json(found)] for (name, dirs), found in self._lookups.items()),
            "files": sorted([path, *(stat or (-1, -1))] for path, stat in self._files.items()),
        }

    # ------------------------------------------------------------------ resolution
    def search_path(self) -> list[str]:
        """Where absolute imports are looked for: the analysed file's package root, then ``sys.path``."""
        if self._search_path is None:
            roots = [str(_package_root(self.origin))] if self.origin is not None else []
            self._search_path = list(dict.fromkeys(roots + [os.path.abspath(p or os.curdir) for p in sys.path]))
        return self._search_path

    def _resolve_qualified(self, qualname: str, importer: str, hops: int, active: frozenset) -> Optional[Definition]:
        """`qualname` as written in an import of file `importer` (leading dots: relative to it)."""
        if hops <= 0:
            return None
        parts, index, parent, current = self._locate_modules(qualname, importer)
        remainder = parts[index:]
        if not remainder and parent is not None:
            # `from pkg import f` where pkg/__init__.py does `from .f import f`: the package's binding hides the
            # submodule of the same name (timm.layers.create_conv2d).
            summary = self._summary(parent)
            return None if summary is None else self._define(summary, parts[-1:], hops - 1, active)
        if not remainder or current is None:
            return None
        summary = self._summary(current)
        return None if summary is None else self._define(summary, remainder, hops - 1, active)

    def _locate_modules(self, qualname: str, importer: str) -> tuple[list[str], int, Optional[str], Optional[str]]:
        """`qualname` as written in an import of file `importer`: its dotted parts, how many of them name modules
        (looked up one level at a time; the rest are names defined in the last), and the files of the last two
        modules found (None: none, or a namespace package)."""
        stripped = qualname.lstrip(".")
        level = len(qualname) - len(stripped)
        parts = stripped.split(".") if stripped else []
        if level:
            package = Path(importer).parent
            for _ in range(level - 1):
                package = package.parent
            dirs: Optional[tuple[str, ...]] = (str(package),)
            init = package / "__init__.py"
            current: Optional[str] = str(init) if os.path.isfile(init) else None
        else:
            dirs, current = tuple(self.search_path()), None
        index, parent = 0, None
        while index < len(parts) and dirs is not None:
            found = self._locate(parts[index], dirs)
            if found is None:
                break
            parent, current, dirs = current, found.origin, found.submodules
            index += 1
        return parts, index, parent, current

    def _lookup(self, summary: FileSummary, parts: list[str], hops: int, active: frozenset) -> Optional[ClassRef]:
        """The class `parts` (a name, maybe followed by attributes) names in a file."""
        found = self._define(summary, parts, hops, active)
        return ClassRef(found.path, found.name) if found is not None and found.kind == "class" else None

    def _define(self, summary: FileSummary, parts: list[str], hops: int, active: frozenset) -> Optional[Definition]:
        """The definition `parts` (a name, maybe followed by attributes) names in a file."""
        key = (summary.path, ".".join(parts))
        if key in self._resolved:
            return self._resolved[key]
        if hops <= 0 or key in active:
            return None  # too deep, or a cycle of re-exports
        active = active | {key}
        head, rest = parts[0], parts[1:]
        binding = summary.bindings.get(head)
        result: Optional[Definition] = None
        if binding is None:
            for star in summary.star_imports:
                result = self._resolve_qualified(_join(star, ".".join(parts)), summary.path, hops - 1, active)
                if result is not None:
                    break
        elif binding[0] in ("class", "function", "value"):
            result = None if rest else Definition(summary.path, head, binding[0])
        elif binding[0] == "import":
            result = self._resolve_qualified(_join(binding[1], ".".join(rest)), summary.path, hops - 1, active)
        else:  # alias: `Block = layers.Block`
            result = self._define(summary, binding[1].split(".") + rest, hops - 1, active)
        self._resolved[key] = result
        return result

    def _is_module(self, ref: ClassRef, active: frozenset) -> bool:
        """Whether a class of another file is a module class (`active`: the classes being judged, for cycles)."""
        if ref in self._verdicts:
            return self._verdicts[ref]
        found_class = self._class(ref)
        if found_class is None or ref in active or len(active) >= MAX_HOPS:
            return False
        summary, info = found_class
        if self._is_torch_base(summary, ref):
            return True  # torch's own class, reached through torch's sources
        active = active | {ref}
        result = False
        for base in info.bases:
            if base is None:
                continue
            qualname = self._qualified(summary, base)
            if qualname is not None and is_module_base_name(qualname):
                result = True
                break
            found = self._lookup(summary, base.split("."), MAX_HOPS, frozenset())
            if found is None:
                result = is_module_by_name(qualname or base)
            else:
                result = self._is_module(found, active)
            if result:
                break
        self._verdicts[ref] = result
        return result

    def _class(self, ref: ClassRef) -> Optional[tuple[FileSummary, ClassSummary]]:
        summary = self._summary(ref.path)
        info = summary.classes.get(ref.name) if summary is not None else None  # gone if the file changed meanwhile
        return None if summary is None or info is None else (summary, info)

    @staticmethod
    def _is_torch_base(summary: FileSummary, ref: ClassRef) -> bool:
        return is_module_base_name(f"{summary.module_name}.{ref.name}" if summary.module_name else ref.name)

    @staticmethod
    def _qualified(summary: FileSummary, base: str) -> Optional[str]:
        """A base expression of a file as an absolute qualified name, when its head is imported."""
        head, _, rest = base.partition(".")
        binding = summary.bindings.get(head)
        if binding is None or binding[0] != "import":
            return None
        return _absolute(_join(binding[1], rest), summary)

    # ------------------------------------------------------------------ files
    def _locate(self, name: str, dirs: tuple[str, ...]) -> Optional[Located]:
        key = (name, dirs)
        if key not in self._lookups:
            if key not in _LOCATED:
                _LOCATED[key] = locate(name, dirs)
            self._lookups[key] = _LOCATED[key]
        return self._lookups[key]

    def _summary(self, path: str) -> Optional[FileSummary]:
        if path not in self._files:
            self._files[path] = _stat(path)
        stat = self._files[path]
        if stat is None:
            return None
        cached = _SUMMARIES.get(path)
        if cached is not None and cached[:2] == stat:
            return cached[2]
        try:
            summary: Optional[FileSummary] = summarize(Path(path), Path(path).read_bytes())
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            summary = None  # unreadable or not Python this interpreter parses: its classes stay unresolved
        _SUMMARIES[path] = (*stat, summary)
        return summary


def locate(name: str, dirs: tuple[str, ...]) -> Optional[Located]:
    """The module or package `name` (one component) in `dirs`, found as the import system would, without
    importing anything; None when absent or not Python source (a C extension, bytecode only)."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, list(dirs))
    except Exception:  # noqa: BLE001 - a path hook failing on an odd sys.path entry: the name stays unresolved
        return None
    if spec is None:
        return None
    origin = spec.origin if isinstance(spec.origin, str) and spec.origin.endswith(".py") else None
    submodules = tuple(spec.submodule_search_locations) if spec.submodule_search_locations is not None else None
    if origin is None and submodules is None:
        return None
    return Located(origin, submodules)


def dependencies_unchanged(record: dict[str, object], path: str) -> bool:
    """Whether resolution for the file at `path` would read what `record` (:meth:`BaseResolver.dependencies`)
    says it read: the same file, search path, look-up results and files (modification time and size)."""
    if not record:
        return True
    try:
        resolver = BaseResolver(path)
        if str(resolver.origin) != record["origin"] or resolver.search_path() != record["search_path"]:
            return False
        for name, dirs, found in record["lookups"]:  # type: ignore[attr-defined]
            if _located_json(locate(name, tuple(dirs))) != found:
                return False
        return all(list(_stat(p) or (-1, -1)) == [m, s] for p, m, s in record["files"])  # type: ignore[attr-defined]
    except (KeyError, TypeError, ValueError):
        return False


def _located_json(found: Optional[Located]) -> Optional[list[object]]:
    return None if found is None else [found.origin, None if found.submodules is None else list(found.submodules)]


def _stat(path: str) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _existing_file(path: Optional[str]) -> Optional[Path]:
    if not path:
        return None
    try:
        resolved = Path(path).resolve()
        return resolved if os.path.isfile(resolved) else None  # never raises
    except (OSError, RuntimeError, ValueError):
        return None


def _all_names(summary: FileSummary) -> Optional[frozenset[str]]:
    """The names a file's `__all__` lists; None when it is computed or bound more than once."""
    value = summary.values.get("__all__")
    if "__all__" in summary.ambiguous or not isinstance(value, (ast.List, ast.Tuple)):
        return None
    names = [el.value for el in value.elts if isinstance(el, ast.Constant) and isinstance(el.value, str)]
    return frozenset(names) if len(names) == len(value.elts) else None


def _join(prefix: str, rest: str) -> str:
    if not rest:
        return prefix
    return prefix + rest if not prefix or prefix.endswith(".") else f"{prefix}.{rest}"


def _absolute(qualname: str, summary: FileSummary) -> Optional[str]:
    """A relative name of an import in `summary`'s file made absolute through its module name."""
    stripped = qualname.lstrip(".")
    level = len(qualname) - len(stripped)
    if not level:
        return qualname
    package = summary.module_name.split(".") if summary.module_name else []
    if not summary.path.endswith("__init__.py"):
        package = package[:-1]
    if level - 1 > len(package):
        return None
    package = package[: len(package) - (level - 1)]
    return ".".join(package + [stripped]) if stripped else ".".join(package)

"""Guards that prove a definition elsewhere in the file computes exactly a known function (ADP011, ADP013).

ADP011 rewrites the instantiation of an RMSNorm class and ADP013 a call of a ``rotate_half`` (or GPT-J
``rotate_every_two``) helper; neither is judged by its name. The guard finds the class or function defined at the top level of the same file and compares
its methods, as Python ASTs, with templates of the forms the runtime kernel reproduces:

* local variables and parameters are renamed by order of first appearance (so ``x``/``hidden_states`` do not
  matter), docstrings and annotations are dropped, and module-level names are replaced by what they import
  (``nn`` -> ``torch.nn``), so aliases do not matter either;
* everything else (operators, constants, attribute names, call arguments, statement order) must be identical.

A name the file binds more than once (``T5LayerNorm = FusedRMSNorm`` under ``try``, a parameter or local variable
of that name anywhere), patches (``Norm.forward = ...``, ``setattr(Norm, ...)``) or may rebind through a star import
is refused: the call might not reach the definition that was checked.
"""

from __future__ import annotations

import ast
import codecs
import copy
import functools
import re
import unicodedata
from typing import Optional, Sequence, Union

import libcst as cst

from . import cstwalk, files, positions
from .dsl import CallNode, Const
from .guards import Refused, guard
from .matcher import Match, Placement
from .class_bases import BaseResolver, ClassRef, is_module_base_name
from .qualnames import ImportTable, ast_dotted_name
from .structure import ClassStructure, Value

_FunctionDef = Union[ast.FunctionDef, ast.AsyncFunctionDef]

# ------------------------------------------------------------------------------------------ templates

# ADP011: forward (and helpers) of each casting order of adopter_kernels.rms_norm, in each spelling accepted; WEIGHT and
# EPS stand for the attribute names the rule's variant passes to adopter_kernels.rms_norm_module.
RMS_NORM_TEMPLATES: dict[str, tuple[tuple[str, ...], ...]] = {
    "llama": ((
        """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.EPS)
    return self.WEIGHT * hidden_states.to(input_dtype)
""",
    ), (  # Meta's LLaMA reference code, llama2.c, Mistral's: the same order, a helper and `type_as`
        """
def _norm(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.EPS)
""",
        """
def forward(self, x):
    output = self._norm(x.float()).type_as(x)
    return output * self.WEIGHT
""",
    ),),
    "t5": ((
        """
def forward(self, hidden_states):
    variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.EPS)
    if self.WEIGHT.dtype in [torch.float16, torch.bfloat16]:
        hidden_states = hidden_states.to(self.WEIGHT.dtype)
    return self.WEIGHT * hidden_states
""",
    ),),
    "gemma": ((
        """
def _norm(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.EPS)
""",
        """
def forward(self, x):
    output = self._norm(x.float())
    output = output * (1.0 + self.WEIGHT.float())
    return output.type_as(x)
""",
    ),),
    "olmo2": ((
        """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.EPS)
    return (self.WEIGHT * hidden_states).to(input_dtype)
""",
    ),),
    "helium": ((
        """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.EPS)
    return (self.WEIGHT.to(torch.float32) * hidden_states).to(input_dtype)
""",
    ), (  # transformers' Moshi and Kyutai speech-to-text: the same order, a helper, `weight.float()` and `type_as`
        """
def _norm(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.EPS)
""",
        """
def forward(self, x):
    output = self._norm(x.float())
    output = output * self.WEIGHT.float()
    return output.type_as(x)
""",
    ),),
}

# Methods an RMSNorm class may have besides the template's: the constructor (the subclass inherits it, and the
# fused forward reads the same attributes the original forward read) and the repr.
_FREE_METHODS = ("__init__", "extra_repr")
_MOST_METHODS = max(len(t) for spellings in RMS_NORM_TEMPLATES.values() for t in spellings) + len(_FREE_METHODS)
# Class decorators known to leave forward alone: transformers' hub-kernel marker only tags the class for an explicit
# `kernelize()` call (an opt-in that swaps in another RMSNorm kernel).
_TRANSPARENT_CLASS_DECORATORS = ("use_kernel_forward_from_hub",)

# ADP013: Hugging Face's rotate_half, the rotation adopter_kernels.rotary_embedding applies.
ROTATE_HALF_TEMPLATES: tuple[str, ...] = (
    """
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)
""",
)

# ADP013 interleaved variant: GPT-J's rotate_every_two (its 4-D indexing is reproduced by the kernel's reference).
ROTATE_EVERY_TWO_TEMPLATES: tuple[str, ...] = (
    """
def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)
""",
)

# ADP010: a helper that spells `x is not None` (lucidrains' `exists`), which an absorbed `if` may test.
NOT_NONE_TEMPLATES: tuple[str, ...] = (
    """
def exists(val):
    return val is not None
""",
)

_TEMPLATE_TABLE = ImportTable(names={"torch": "torch"})


@functools.lru_cache(maxsize=None)
def _rotation_attributes() -> tuple[frozenset[str], ...]:
    """The attribute names of each rotation template: `canonical` renames variables, never attributes."""
    return tuple(
        frozenset(n.attr for n in ast.walk(ast.parse(t)) if isinstance(n, ast.Attribute))
        for t in (*ROTATE_HALF_TEMPLATES, *ROTATE_EVERY_TWO_TEMPLATES)
    )


def _names_template_attributes(fn: cst.FunctionDef) -> bool:
    """Whether the function reads every attribute some rotation template reads (a necessary condition of a match)."""
    attributes = {n.attr.value for n in cstwalk.walk(fn) if type(n) is cst.Attribute}  # type: ignore[attr-defined]
    return any(needed <= attributes for needed in _rotation_attributes())


# ------------------------------------------------------------------------------------------ the file's AST


class _ParsedModule:
    """What the guards read of one file, computed on demand: the top-level definitions, each parsed alone with
    ``ast`` (cheap: most candidates fail on their own definition), and the bindings of every name in the whole file
    (parsed only once a definition matched its template)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.table = ImportTable.from_module(module)
        self.defs: dict[str, list[Union[cst.ClassDef, cst.FunctionDef]]] = {}
        for stmt in module.body:
            if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
                self.defs.setdefault(stmt.name.value, []).append(stmt)
        # memo of the guards' checks per definition: a verdict (bool) or a method count (int)
        self.verdicts: dict[tuple[object, ...], int] = {}
        # ADP001-003, ADP014: why an attention class does not fit the drop-in (None: it fits), per class and rule
        self.drop_in_misfits: dict[tuple[str, str, str], Optional[str]] = {}
        self._asts: dict[str, ast.AST] = {}
        self._headers: Optional[positions.HeaderLines] = None  # where definitions start in the source
        self._utf8 = codecs.lookup(module.encoding).name == "utf-8"  # source bytes `ast.parse` reads without a cookie
        self._rotations: Optional[set[str]] = None
        self._bindings: Optional[dict[str, int]] = None
        self._mutated: set[str] = set()  # `Name.attr = ...`, `del Name.attr`, `setattr(Name, ...)`
        self._star_import = False  # `from m import *` may rebind any name
        self._mentions: dict[str, bool] = {}

    def definition(self, name: str, kind: type) -> Optional[ast.AST]:
        """The file's one top-level ``class``/``def`` of `name`, parsed alone; None if there is not exactly one."""
        found = self.defs.get(name, [])
        if len(found) != 1 or not isinstance(found[0], kind):
            return None
        if name not in self._asts:
            self._asts[name] = self._from_source(found[0]) or ast.parse(self.module.code_for_node(found[0])).body[0]
        return self._asts[name]

    def _from_source(self, node: Union[cst.ClassDef, cst.FunctionDef]) -> Optional[ast.stmt]:
        """`node` parsed from its own lines of the source bytes, where they can be cut out (a header line that occurs
        once, no decorators, UTF-8): rendering a class's code from the tree costs more than parsing it."""
        source = files.source_bytes(self.module)  # not `source_of`: rendering the module to discard it would cost more
        after_keyword = node.whitespace_after_class if isinstance(node, cst.ClassDef) else node.whitespace_after_def
        if source is None or node.decorators or after_keyword.value.strip(" \t") or not self._utf8:
            return None  # (whitespace other than blanks after the keyword: the header pattern may miss it)
        if self._headers is None:
            self._headers = positions.HeaderLines(source)
        span = self._headers.span(node)
        if span is None:
            return None
        try:
            body = ast.parse(source[span[0] : span[1]]).body
        except (SyntaxError, ValueError):
            return None  # cut inside a string (the next header line is text), or decorators of what follows
        first = body[0] if body else None
        kind = ast.ClassDef if isinstance(node, cst.ClassDef) else (ast.FunctionDef, ast.AsyncFunctionDef)
        return first if isinstance(first, kind) and first.name == node.name.value else None

    def rotation_helpers(self) -> set[str]:
        """Top-level functions whose body is a rotation template (either kind): ADP013's cheap per-file test."""
        if self._rotations is None:
            self._rotations = set()
            templates = {_template_dumps(t)[1] for t in (*ROTATE_HALF_TEMPLATES, *ROTATE_EVERY_TWO_TEMPLATES)}
            for name, found in self.defs.items():
                # The templates are three or four statements (a docstring may precede them), and name the same
                # attributes as a match (`torch.cat`, `x.shape`): rendering and parsing the other functions is spared.
                if (
                    isinstance(found[0], cst.FunctionDef)
                    and len(found) == 1
                    and len(_suite_body(found[0])) <= 5
                    and _names_template_attributes(found[0])
                ):
                    fn = self.definition(name, cst.FunctionDef)
                    if isinstance(fn, ast.FunctionDef) and canonical(fn, self.table) in templates:
                        self._rotations.add(name)
        return self._rotations

    def mentions(self, word: str) -> bool:
        """Whether `word` occurs anywhere in the file's text (a name or attribute spelled so must)."""
        if word not in self._mentions:
            source = files.source_of(self.module)
            self._mentions[word] = (word.encode() in source) if isinstance(source, bytes) else (word in source)
        return self._mentions[word]

    def bound_once(self, name: str) -> bool:
        """Whether the file binds `name` only by its definition and nothing patches or may rebind it."""
        source = files.source_of(self.module)
        if isinstance(source, bytes) and _bound_once_by_text(source, self.module.encoding, name):
            return True  # most files: proven from the text, without parsing and walking the whole file
        if self._bindings is None:
            self._bindings = {}
            for node in ast.walk(ast.parse(source)):
                for bound in _bound_names(node):
                    self._bindings[bound] = self._bindings.get(bound, 0) + 1
                if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
                    if isinstance(node.value, ast.Name):
                        self._mutated.add(node.value.id)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    if node.func.id in ("setattr", "delattr") and node.args and isinstance(node.args[0], ast.Name):
                        self._mutated.add(node.args[0].id)
                elif isinstance(node, ast.alias) and node.name == "*":
                    self._star_import = True
        return self._bindings.get(name) == 1 and name not in self._mutated and not self._star_import


# Where a word can only be a definition of it (`class N`, `def N`), a read of it (`N(...)` not after `def`/`class`,
# `.N` an attribute or module path), or text (inside quotes, on a comment line without quotes).
_DEFINED_BEFORE = re.compile(rb"(?:^|[^\w.])(?:class|def)[ \t]+$")
_CALLED_AFTER = re.compile(rb"[ \t]*\(")
_STAR_IMPORT = re.compile(rb"\bimport[ \t(]*\*")
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _bound_once_by_text(source: bytes, encoding: str, name: str) -> bool:
    """True when the text alone shows that `name` is bound exactly once (one ``class``/``def`` of it) and every
    other occurrence is a call, an attribute or module path, or text: then no statement binds, deletes or patches
    it, which is what :meth:`_ParsedModule.bound_once` checks. False means "not shown": the AST decides. A line with
    non-ASCII characters holding the name, NFKC-normalised as identifiers are, is not judged (another spelling of
    the same name), nor one with control characters (odd whitespace between ``class`` and the name)."""
    word = name.encode()
    if not word.isascii() or _STAR_IMPORT.search(source):
        return False
    utf8 = encoding.replace("_", "-").lower() in ("utf-8", "utf8")
    definitions = 0
    lines = source.split(b"\n")
    for i, line in enumerate(lines):
        if not line.isascii():
            if not utf8 or name in unicodedata.normalize("NFKC", line.decode("utf-8", "replace")):
                return False
            continue
        if word not in line:
            continue
        if _CONTROL.search(line):
            return False
        if line.lstrip().startswith(b"#") and b"'" not in line and b'"' not in line:
            continue  # a comment, or text of a string that does not end on this line
        for hit in re.finditer(rb"\b" + re.escape(word) + rb"\b", line):
            before, after = line[: hit.start()], line[hit.end() :]
            if not before.strip() and i and lines[i - 1].endswith(b"\\"):
                return False  # continues the previous line (`class \` newline `N(...)`): not judged
            if _DEFINED_BEFORE.search(before):
                definitions += 1
            elif before.rstrip().endswith(b".") or (before[-1:] in (b"'", b'"') and after[:1] in (b"'", b'"')):
                continue
            elif not _CALLED_AFTER.match(after):
                return False
    return definitions == 1


def _suite_body(fn: cst.FunctionDef) -> Sequence[cst.BaseStatement]:
    body = fn.body
    return body.body if isinstance(body, cst.IndentedBlock) else ()


def _bound_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return [node.id]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.alias):
        return [(node.asname or node.name).split(".")[0]]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def _parsed(module: cst.Module) -> _ParsedModule:
    """The file's AST, parsed once per analysis of the module (a guard runs once per candidate site)."""
    memo = files.memo_of(module)
    hit = memo.get("structural_guards")
    if not isinstance(hit, _ParsedModule):
        hit = memo["structural_guards"] = _ParsedModule(module)
    return hit


# ------------------------------------------------------------------------------------------ canonical form


def _resolve(node: ast.AST, table: ImportTable) -> Optional[str]:
    name = ast_dotted_name(node)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    base = table.names.get(head)
    if base is None:
        return None
    return f"{base}.{rest}" if rest else base


class _Canonical(ast.NodeTransformer):
    """Renames locals by first appearance and replaces module-level names by what they import."""

    def __init__(self, local: set[str], table: ImportTable) -> None:
        self.local = local
        self.table = table
        self.names: dict[str, str] = {}

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.local:
            new = self.names.setdefault(node.id, f"_v{len(self.names)}")
            return ast.copy_location(ast.Name(id=new, ctx=node.ctx), node)
        return ast.copy_location(ast.Name(id=self.table.names.get(node.id, node.id), ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        new = self.names.setdefault(node.arg, f"_v{len(self.names)}")
        return ast.arg(arg=new, annotation=None)


def canonical(fn: _FunctionDef, table: ImportTable, replace: Optional[dict[str, str]] = None) -> Optional[str]:
    """The function's canonical dump; None for forms never accepted (decorators, async, defaults, *args)."""
    args = fn.args
    if (
        isinstance(fn, ast.AsyncFunctionDef)
        or fn.decorator_list
        or args.posonlyargs
        or args.vararg
        or args.kwonlyargs
        or args.kwarg
        or args.defaults
    ):
        return None
    func = copy.deepcopy(fn)
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        func.body = body[1:] or [ast.Pass()]  # docstring
    func.name, func.returns = "f", None
    if replace:
        for node in ast.walk(func):
            if isinstance(node, ast.Attribute) and node.attr in replace:
                node.attr = replace[node.attr]
    local = {a.arg for a in func.args.args}
    local |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    func = _Canonical(local, table).visit(func)
    return ast.dump(func, annotate_fields=False)


@functools.lru_cache(maxsize=None)
def _template_dumps(source: str, weight: str = "", eps: str = "") -> tuple[str, str]:
    """(function name, canonical dump) of a template, ``self.WEIGHT``/``self.EPS`` renamed as the variant says."""
    fn = ast.parse(source).body[0]
    assert isinstance(fn, ast.FunctionDef)
    dump = canonical(fn, _TEMPLATE_TABLE, {"WEIGHT": weight, "EPS": eps} if weight else None)
    assert dump is not None
    return fn.name, dump


# ------------------------------------------------------------------------------------------ ADP011 FuseRMSNorm


def _variant_constants(match: Match) -> Optional[tuple[str, str, str]]:
    """(cast, weight attribute, eps attribute) the rule's variant passes to ``rms_norm_module``."""
    target = match.rule.init.target[0] if match.rule.init is not None and match.rule.init.target else None
    if not isinstance(target, CallNode) or target.callee_args is None:
        return None
    consts = [a.value for a in target.callee_args.positional[1:] if isinstance(a, Const)]
    if len(consts) != 3 or not all(isinstance(c, str) for c in consts):
        return None
    return consts[0], consts[1], consts[2]  # type: ignore[return-value]


def _is_module_base(bases: list[ast.expr], table: ImportTable) -> bool:
    return len(bases) == 1 and _resolve(bases[0], table) in ("torch.nn.Module", "torch.nn.modules.module.Module")


def _transparent_decorator(node: ast.expr, table: ImportTable) -> bool:
    func = node.func if isinstance(node, ast.Call) else node
    name = _resolve(func, table) or ast_dotted_name(func) or ""
    return name.split(".")[-1] in _TRANSPARENT_CLASS_DECORATORS


@guard
def rms_norm_class_is_exact(match: Match, placement: Placement) -> Union[bool, Refused]:
    """The instantiated class is defined once at the top of this file, derives from ``nn.Module`` only, and its
    forward (with its helpers) is exactly the RMSNorm template of the variant's casting order, reading the
    variant's weight and eps attributes."""
    constants = _variant_constants(match)
    module = match.cls.module
    bindings = list(match.init_matches.values())
    if constants is None or module is None or len(bindings) != 1:
        return False
    value = bindings[0].value
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)):
        return False  # a local class is called by its bare name
    cast, weight, eps = constants
    parsed = _parsed(module)
    key = ("rms_norm", value.func.value, cast, weight, eps)
    if key not in parsed.verdicts:
        parsed.verdicts[key] = _rms_norm_class(parsed, value.func.value, cast, weight, eps)
    if parsed.verdicts[key]:
        return True
    most = _most_methods(cast)
    if most is None or not _few_methods(parsed, value.func.value, most):
        return False  # not shaped like an RMSNorm at all (most layers): declined without a listed refusal
    return Refused(
        f"class {value.func.value} is shaped like an RMSNorm (a forward computing rsqrt) but is not exactly one of the "
        "forms this variant knows (its methods, casts, weight and eps attributes, a single definition in this file)",
        _only_definition(parsed, value.func.value),
    )


def _instantiates_rms_norm_shape(cls: ClassStructure) -> bool:
    """Whether the class instantiates, by its bare name, a top-level class of this file shaped like an RMSNorm
    (`_few_methods`): the guard's own first test, so a False spares matching every binding of the class against
    every variant (the rule's pattern matches any instantiation)."""
    if cls.module is None:
        return False
    names = {
        b.value.func.value
        for bindings in cls.init_bindings.values()
        for b in bindings
        if isinstance(b.value, cst.Call) and isinstance(b.value.func, cst.Name)
    }
    parsed = _parsed(cls.module)
    return any(name in parsed.defs and _few_methods(parsed, name, _MOST_METHODS) for name in names)


rms_norm_class_is_exact.may_match = _instantiates_rms_norm_shape  # type: ignore[attr-defined]


def _only_definition(parsed: _ParsedModule, name: str) -> Optional[cst.CSTNode]:
    """The top-level class or function `name`, when the file defines it once."""
    found = parsed.defs.get(name, [])
    return found[0] if len(found) == 1 else None


def _rms_norm_class(parsed: _ParsedModule, name: str, cast: str, weight: str, eps: str) -> bool:
    most = _most_methods(cast)
    if most is None or not _few_methods(parsed, name, most):
        return False  # cheap CST test first: most instantiated classes are attention layers, blocks, models
    cls = parsed.definition(name, cst.ClassDef)
    if not isinstance(cls, ast.ClassDef) or cls.keywords:
        return False
    if not _is_module_base(cls.bases, parsed.table):
        return False
    if not all(_transparent_decorator(d, parsed.table) for d in cls.decorator_list):
        return False
    methods: dict[str, _FunctionDef] = {}
    for i, stmt in enumerate(cls.body):
        if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # class docstring
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or stmt.name in methods:
            return False  # class attributes, properties or a redefined method: not judged, refused
        methods[stmt.name] = stmt
    spellings = RMS_NORM_TEMPLATES[cast]
    return any(_is_spelling(methods, templates, parsed.table, weight, eps) for templates in spellings) and (
        parsed.bound_once(name)
    )


def _most_methods(cast: str) -> Optional[int]:
    """The most methods a class of the casting order may have: its longest spelling's, plus the free ones."""
    spellings = RMS_NORM_TEMPLATES.get(cast)
    return None if spellings is None else max(len(t) for t in spellings) + len(_FREE_METHODS)


def _is_spelling(
    methods: dict[str, _FunctionDef], templates: tuple[str, ...], table: ImportTable, weight: str, eps: str
) -> bool:
    """Whether the class's methods are exactly one spelling's (its forward and helpers, plus free methods)."""
    wanted = dict(_template_dumps(t, weight, eps) for t in templates)
    if set(methods) - set(wanted) - set(_FREE_METHODS) or set(wanted) - set(methods):
        return False
    return all(canonical(methods[m], table) == dump for m, dump in wanted.items())


def _few_methods(parsed: _ParsedModule, name: str, most: int) -> bool:
    """Whether the top-level class `name` holds at most `most` methods (and perhaps a docstring), one ``forward``,
    and mentions ``rsqrt``."""
    key = ("shape", name)
    if key not in parsed.verdicts:  # one CST walk per class, whatever the variant
        parsed.verdicts[key] = _method_count(parsed, name)
    count = parsed.verdicts[key]
    return 0 < count <= most


def _method_count(parsed: _ParsedModule, name: str) -> int:
    """The number of methods of a plausible RMSNorm class `name` (only methods and a docstring, a ``forward``,
    some ``rsqrt``: every template calls torch.rsqrt); 0 for any other class, which is then never rendered."""
    found = parsed.defs.get(name, [])
    if len(found) != 1 or not isinstance(found[0], cst.ClassDef) or not isinstance(found[0].body, cst.IndentedBlock):
        return 0
    body = found[0].body.body
    methods = [stmt.name.value for stmt in body if isinstance(stmt, cst.FunctionDef)]
    if len(methods) < len(body) - 1 or "forward" not in methods:
        return 0
    if len(methods) > _MOST_METHODS:
        return len(methods)  # too many for any template, whatever its body: spare the walk for `rsqrt`
    if not parsed.mentions("rsqrt"):
        return 0  # most files: no attribute of that name anywhere
    computing = [stmt for stmt in body if isinstance(stmt, cst.FunctionDef) and stmt.name.value not in _FREE_METHODS]
    rsqrt = any(
        type(n) is cst.Attribute and n.attr.value == "rsqrt"  # type: ignore[attr-defined]
        for fn in computing
        for n in cstwalk.walk(fn.body)
    )
    return len(methods) if rsqrt else 0


# ------------------------------------------------------------------------------------------ ADP013 FuseRotaryEmbedding


@guard
def rotate_half_is_exact(match: Match, placement: Placement) -> Union[bool, Refused]:
    """``$r`` is ``F($x)`` for a function ``F`` defined once at the top of this file whose body is exactly
    Hugging Face's ``rotate_half`` (GPT-J's ``rotate_every_two`` for the interleaved variant), called on the very
    value ``$x`` the rotary expression multiplies by ``cos``."""
    module = match.cls.module
    x, rotated = match.env.get("x"), match.env.get("r")
    if module is None or not isinstance(x, Value) or not isinstance(rotated, Value) or x.kind != "var":
        return False
    call = rotated.expr
    if rotated.kind != "expr" or not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name):
        return False
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return False
    arg = call.args[0].value
    if not (isinstance(arg, cst.Name) and arg.value == x.text and x.uses and x.uses[0] in rotated.uses):
        # the helper must rotate the same value (same variable, same value id)
        return Refused(f"the rotation helper is not called on `{x.text}`, the value multiplied by cos")
    parsed = _parsed(module)
    name, interleaved = call.func.value, _interleaved(match)
    key = ("rotate", name, interleaved)
    if key not in parsed.verdicts:
        fn = parsed.definition(name, cst.FunctionDef)
        dump = canonical(fn, parsed.table) if isinstance(fn, ast.FunctionDef) else None
        templates = ROTATE_EVERY_TWO_TEMPLATES if interleaved else ROTATE_HALF_TEMPLATES
        exact = dump is not None and any(dump == _template_dumps(t)[1] for t in templates)
        parsed.verdicts[key] = exact and parsed.bound_once(name)
    return bool(parsed.verdicts[key]) or Refused(
        f"{name} is not defined once in this file as exactly Hugging Face's rotate_half or GPT-J's rotate_every_two "
        "(the variants' rotations)",
        _only_definition(parsed, name),
    )


def is_not_none_helper(module: cst.Module, name: str) -> bool:
    """Whether ``name(x)`` is ``x is not None`` with no other effect: `name` is a function defined once at the top
    of `module` (and bound nowhere else) whose body is exactly ``return <its argument> is not None``."""
    parsed = _parsed(module)
    key = ("not-none", name)
    if key not in parsed.verdicts:
        fn = parsed.definition(name, cst.FunctionDef)
        dump = canonical(fn, parsed.table) if isinstance(fn, ast.FunctionDef) else None
        exact = dump is not None and any(dump == _template_dumps(t)[1] for t in NOT_NONE_TEMPLATES)
        parsed.verdicts[key] = exact and parsed.bound_once(name)
    return bool(parsed.verdicts[key])


def _interleaved(match: Match) -> bool:
    """Whether the variant's target passes ``interleaved=True`` (GPT-J's rotation)."""
    target = match.rule.forward.target[0] if match.rule.forward is not None and match.rule.forward.target else None
    keywords = dict(target.args.keywords) if isinstance(target, CallNode) else {}
    return keywords.get("interleaved") == Const(True)


def _defines_rotation(cls: ClassStructure) -> bool:
    return cls.module is not None and bool(_parsed(cls.module).rotation_helpers())


# Most files define no rotation helper: ADP013 then walks none of their classes.
rotate_half_is_exact.may_match = _defines_rotation  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------- ADP001-003, ADP014 attention drop-ins

# What the SDPA subclasses of adopter_kernels/attention.py need of the class they extend (kept equal to the kernels'
# `_forward_parameters(mixin)` and `_*_ATTRIBUTES` by tests/test_attention_class_guard.py): the mixin's forward
# replaces the class's, so it must accept exactly these parameters, and reads these attributes (set in __init__,
# registered as buffers, or methods).
ATTENTION_DROP_INS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ADP001": (
        ("hidden_states", "attention_mask", "head_mask", "encoder_hidden_states", "encoder_attention_mask",
         "past_key_value", "output_attentions"),
        ("query", "key", "value", "dropout", "num_attention_heads", "attention_head_size", "position_embedding_type",
         "is_decoder"),
    ),
    "ADP002": (
        ("hidden_states", "mask", "key_value_states", "position_bias", "past_key_value", "layer_head_mask",
         "query_length", "use_cache", "output_attentions"),
        ("q", "k", "v", "o", "n_heads", "dropout", "has_relative_attention_bias", "compute_bias", "pruned_heads",
         "is_decoder", "gradient_checkpointing"),
    ),
    "ADP003": (
        ("hidden_states", "layer_past", "attention_mask", "head_mask", "encoder_hidden_states",
         "encoder_attention_mask", "use_cache", "output_attentions"),
        ("c_attn", "c_proj", "attn_dropout", "resid_dropout", "num_heads", "split_size", "scale_attn_weights",
         "scale_attn_by_inverse_layer_idx", "layer_idx", "reorder_and_upcast_attn", "is_cross_attention", "bias"),
    ),
    "ADP014": (
        ("hidden_states", "key_value_states", "past_key_value", "attention_mask", "layer_head_mask",
         "output_attentions"),
        ("embed_dim", "num_heads", "dropout", "head_dim", "scaling", "is_decoder", "k_proj", "v_proj", "q_proj",
         "out_proj"),
    ),
}  # fmt: skip


@guard
def attention_class_fits_drop_in(match: Match, placement: Placement) -> Union[bool, Refused]:
    """ADP001-003, ADP014: the attention class must fit the drop-in: ``forward`` takes exactly the parameters the SDPA
    forward takes (no decorator, no ``*args``/``**kwargs``) and the class sets every attribute it reads. Otherwise
    the subclass would warn and run the original forward: a finding that cannot run the fast path. The class and its
    bases are read in this file or, when imported (``from transformers.models.bert.modeling_bert import
    BertSelfAttention``), in the file that defines it (`class_bases`); a class or base found nowhere is taken on
    trust (the runtime still checks the signature when the class is created)."""
    module = match.cls.module
    bindings = list(match.init_matches.values())
    if module is None or len(bindings) != 1 or not isinstance(bindings[0].value, cst.Call):
        return False
    parsed = _parsed(module)
    func = ast.parse(module.code_for_node(bindings[0].value.func).strip(), mode="eval").body
    local = isinstance(func, ast.Name) and func.id not in parsed.table.names
    name = func.id if isinstance(func, ast.Name) and local else _resolve(func, parsed.table)
    if name is None:
        return True  # a computed class (`layers[kind]`): judged by the rule's name pattern alone
    key = ("drop-in", name, match.rule.code)
    if key not in parsed.drop_in_misfits:
        parameters, attributes = ATTENTION_DROP_INS[match.rule.code]
        if local and not parsed.bound_once(name):
            misfit: Optional[str] = f"`{name}` is bound more than once in this file: which class runs is not known"
        else:
            chain = _class_chain(parsed, match.cls.resolver, name, local)
            reads = FORWARD_READS.get(match.rule.code)
            misfit = _drop_in_misfit(chain, parameters, attributes, reads) if chain is not None else (
                f"`{name}` or one of its bases has several bases or class keywords: the drop-in subclass cannot "
                "take its place"
            )
        parsed.drop_in_misfits[key] = misfit
    misfit = parsed.drop_in_misfits[key]
    if misfit is None:
        return True
    # A forward that computes more would be replaced; any other misfit makes the subclass run the original one.
    computes_more = misfit.endswith((_COMPUTES_MORE, _OVERRIDE_IGNORED))
    return Refused(misfit if computes_more else f"{misfit}; it would run the original forward", bindings[0].value)


# A class of the chain and the file it is defined in (None: the analysed file).
_ChainClass = tuple[ast.ClassDef, Optional[str]]


def _class_chain(
    parsed: _ParsedModule, resolver: Optional[BaseResolver], name: str, local: bool
) -> Optional[tuple[list[_ChainClass], bool]]:
    """The class `name` (of this file, or imported under that qualified name) and its bases in order, up to torch's
    ``Module``; and whether the chain is complete (False: a base could not be read, what it defines is taken on
    trust). None for a shape the drop-in cannot take: several bases, class keywords, a cycle."""
    chain: list[_ChainClass] = []
    if not local:
        ref = resolver.resolve(name) if resolver is not None else None
        return _foreign_chain(resolver, ref, chain) if resolver is not None and ref is not None else ([], False)
    current = name
    while True:
        cls = parsed.definition(current, cst.ClassDef)
        if not isinstance(cls, ast.ClassDef) or any(c is cls for c, _ in chain) or cls.keywords or len(cls.bases) > 1:
            return None
        chain.append((cls, None))
        if not cls.bases or _is_module_base(cls.bases, parsed.table):
            return chain, True
        base = cls.bases[0]
        if isinstance(base, ast.Name) and base.id in parsed.defs:
            current = base.id
            continue
        qualname = _resolve(base, parsed.table)
        ref = resolver.resolve(qualname) if resolver is not None and qualname is not None else None
        return _foreign_chain(resolver, ref, chain) if resolver is not None and ref is not None else (chain, False)


def _foreign_chain(
    resolver: BaseResolver, ref: ClassRef, chain: list[_ChainClass]
) -> Optional[tuple[list[_ChainClass], bool]]:
    """`chain` continued through classes of other files, from `ref`."""
    seen: set[ClassRef] = set()
    current: Optional[ClassRef] = ref
    while current is not None:
        found = resolver.class_and_bases(current)
        if found is None:
            return chain, False  # its file cannot be read any more
        cls, bases = found
        if current in seen or cls.keywords or len(bases) > 1:
            return None
        seen.add(current)
        chain.append((cls, current.path))
        if not bases:
            return chain, True
        qualname, current = bases[0]
        if current is None:
            return chain, is_module_base_name(qualname)
    return chain, True


def _drop_in_misfit(
    found: tuple[list[_ChainClass], bool], parameters: tuple[str, ...], attributes: tuple[str, ...],
    reads: Optional[tuple[frozenset[str], frozenset[str]]] = None,
) -> Optional[str]:
    """Why a class (with its bases: the chain) does not fit the drop-in, or None when it does. Of an incomplete
    chain, what the missing bases define is taken on trust, as for a class found nowhere. `reads`: what the forward
    may read (`FORWARD_READS`), where the rule knows it."""
    chain, complete = found
    forward: Optional[tuple[_FunctionDef, ast.ClassDef, Optional[str]]] = None
    defined: set[str] = set()
    # methods a class overrides below the one defining forward: the forward it inherits calls them, the drop-in's not
    overrides: list[tuple[str, str]] = []
    for cls, path in chain:
        methods: list[tuple[str, str]] = []
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defined.add(stmt.name)
                if stmt.name == "forward" and forward is None:
                    forward = (stmt, cls, path)
                if stmt.name == "__init__":
                    defined |= _self_attributes(stmt)
                elif not (stmt.name.startswith("__") and stmt.name.endswith("__")):
                    methods.append((cls.name, stmt.name))
        if forward is None:
            overrides += methods
    if overrides:  # (a forward in a base not read is inherited as well)
        sub, method = overrides[0]
        return f"`{sub}` overrides `{method}`, which the forward it inherits may call: {_OVERRIDE_IGNORED}"
    if forward is None:
        return None if not complete else f"`{chain[0][0].name}` defines no forward"
    function, cls, path = forward
    # (a local definition is parsed alone: its line numbers are not the file's)
    where = f"`{cls.name}.forward`" + (f" (line {function.lineno} of {path})" if path else "")
    args = function.args
    if isinstance(function, ast.AsyncFunctionDef):
        return f"{where} is async"
    if function.decorator_list:
        return f"{where} is decorated (`@{ast.unparse(function.decorator_list[0])}`), which the drop-in's forward is not"
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or tuple(a.arg for a in args.args[1:]) != parameters:
        return f"{where} takes ({ast.unparse(args)}), not the drop-in's ({', '.join(parameters)})"
    missing = sorted(set(attributes) - defined)
    if complete and missing:
        return f"`{chain[0][0].name}` never sets {', '.join(f'`{m}`' for m in missing)}, which the drop-in reads"
    if reads is not None:
        return _computes_more(function, where, reads)
    return None


def _computes_more(function: _FunctionDef, where: str, reads: tuple[frozenset[str], frozenset[str]]) -> Optional[str]:
    """Why a forward the drop-in replaces may compute something else than the one it was written for: it reads an
    attribute of ``self`` or calls a ``torch``/``math`` function that one does not (mmdet's copy of BERT's attention
    clamps the scores under ``self.clamp_min_for_underflow``: the drop-in's SDPA forward would not)."""
    attributes, functions = reads
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if node.attr not in attributes:
                return f"{where} reads `self.{node.attr}`, which {_COMPUTES_MORE}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            root = node.func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in _LIBRARY_ROOTS and node.func.attr not in functions:
                return f"{where} calls `{ast.unparse(node.func)}`, which {_COMPUTES_MORE}"
    return None


# What a forward may read to be the one the drop-in replaces (Hugging Face's BertSelfAttention.forward, 4.x):
# its attributes of `self` and the torch/math functions it calls (by their last name; the names below are how
# code spells those modules).
_LIBRARY_ROOTS = frozenset({"torch", "nn", "F", "functional", "math"})
_COMPUTES_MORE = "the forward the drop-in was written for does not: it may compute something the drop-in would not"
_OVERRIDE_IGNORED = "the drop-in's forward would not call it"
FORWARD_READS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "ADP001": (
        frozenset({
            "query", "key", "value", "dropout", "num_attention_heads", "attention_head_size", "all_head_size",
            "position_embedding_type", "distance_embedding", "max_position_embeddings", "is_decoder", "layer_idx",
            "transpose_for_scores", "training",
        }),
        frozenset({"matmul", "einsum", "arange", "cat", "tensor", "softmax", "sqrt", "long"}),
    ),
}  # fmt: skip


def _self_attributes(init: _FunctionDef) -> set[str]:
    """Attributes ``__init__`` sets on ``self``: ``self.x = ...`` (also annotated, or in a tuple target) and
    ``self.register_buffer("x", ...)`` / ``self.register_parameter("x", ...)``."""
    names: set[str] = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func, first = node.func, node.args[0]
            registers = func.attr in ("register_buffer", "register_parameter")
            if registers and isinstance(func.value, ast.Name) and func.value.id == "self":
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    return names

"""The rule DSL (paper §3.1 and §3.3): parse ``rules/*.adopter`` files into :class:`Rule` objects.

A rule file holds a header and two sections, one per method the rule rewrites::

    rule FuseDropoutLN                  # codemod name
    code ADP005
    summary "Dropout -> residual add -> LayerNorm run as one fused kernel"
    guard dropout_not_inplace           # optional, repeatable: predicates in adopter_codemods.guards

    init:
        torch.nn.Dropout(p=$p) -> $drop;
        torch.nn.LayerNorm(**$ln) -> $norm
        =>
        adopter_kernels.FusedDropoutAddLayerNorm(**$ln, dropout=$p) -> $norm

    forward:
        $drop($a) -> $x;
        $x + $r -> $b;
        $norm($b) -> $c
        =>
        $norm($a, $r) -> $c

Nodes are ``Type(args) -> $out`` (a layer instantiation in ``init``; a layer or function call in ``forward``),
``$layer(args) -> $out`` (a call of the layer bound to ``$layer`` in ``init``), ``Type[$key] -> $out`` (a
subscript such as ``ACT2FN[config.hidden_act]``), binary and unary tensor ops (``$a + $b -> $c``, ``-$a -> $c``),
the wildcard ``*``, and ``?node``, a forward step the code may leave out (see ``Node``). A type may be a choice
``(torch.nn.GELU | torch.nn.ReLU)``; ``*.Name`` is a class called ``Name`` from any module, ``*.*`` any resolved name
(for rules whose guard judges the callee itself). Arguments are ``$var``, constants, ``name=...`` and ``**$rest`` (all arguments the
pattern does not name); a forward target's keyword argument may also be ``in_place($s)``, ``True`` where the operator
step producing ``$s`` matched code written in place (``s += mask``: the kernel then keeps that step's dtype), left
out otherwise (an operator step without it never matches in-place code). An ``init:`` section without ``=>`` only constrains the layers and leaves ``__init__``
unchanged. A ``forward:`` target is one node whose output is a variable or a tuple ``($q, $k, $v)``. The header
``fallback original`` lets a match whose intermediates are read under simple conditions keep the code as written
there (matcher's plan "fallback", docs/ENGINE.md). The header ``uncertain guarded`` lets layers whose type is only
possible or unknown (``norm_layer(planes)``) match, for a target that checks its modules at run time (its
``__init__`` constants are then taken on trust where the code does not settle them: ``bias=bias[0]``, ``**dd``).

One rule may hold several variants of its pattern (the same fusion written in different source forms), each
introduced by a ``variant "label"`` line and holding its own ``init:``/``forward:`` sections; the header is
shared. The variants are tried in file order and a site matched by an earlier variant is not matched again::

    variant "activation module"
    init: ...
    forward: ...

    variant "functional activation"
    init: ...
    forward: ...
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union


class RuleSyntaxError(ValueError):
    """A malformed rule file; the message names file, line and column."""

    def __init__(self, path: str, line: int, col: int, message: str) -> None:
        super().__init__(f"{path}:{line}:{col}: {message}")
        self.path, self.line, self.col, self.detail = path, line, col, message


# ---------------------------------------------------------------------------------------------- AST


@dataclass(frozen=True)
class Var:
    name: str  # without the `$`
    # Where it is written in the rule file, for located errors; not part of its identity.
    line: int = field(default=0, compare=False)
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Const:
    value: Union[str, int, float, bool, None]

    def code(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class InPlace:
    """``in_place($s)`` as a target's keyword argument: ``True`` where the operator step whose output is ``$s``
    matched code written in place (``s += mask``, which keeps the dtype of ``s``); the keyword is left out
    otherwise. A step without it never matches in-place code."""

    var: Var


Atom = Union[Var, Const, InPlace]


@dataclass(frozen=True)
class Args:
    positional: tuple[Atom, ...] = ()
    keywords: tuple[tuple[str, Atom], ...] = ()
    rest: Optional[Var] = None  # `**$rest`


@dataclass(frozen=True)
class CallNode:
    """``Type(args) -> out``, ``$layer(args) -> out`` or ``Type[key] -> out``."""

    types: tuple[str, ...]  # choices; empty when `layer` is set
    layer: Optional[Var]
    args: Args
    outputs: tuple[Var, ...]
    subscript: bool = False
    type_var: Optional[Var] = None  # `$cls:Type(...)` binds the callee as written
    callee_args: Optional[Args] = None  # target `factory($cls)(args)`: the callee is itself a call
    optional: bool = False  # `?node`: see `Node`


@dataclass(frozen=True)
class OpNode:
    op: str
    operands: tuple[Atom, ...]
    outputs: tuple[Var, ...]
    optional: bool = False  # `?node`: see `Node`


@dataclass(frozen=True)
class Wildcard:
    pass


Node = Union[CallNode, OpNode, Wildcard]
# An optional forward source node (`?$s * $scale -> $t`) may be absent from the code: its output variable then binds
# what its first operand (first positional argument) binds, so the chain continues through it, and the target's
# keyword arguments whose variables stay unbound are left out of the call.


@dataclass(frozen=True)
class RuleItem:
    """One `source => target` pair; `target` is None for a constraint-only section."""

    source: tuple[Node, ...]
    target: Optional[tuple[Node, ...]]
    line: int


@dataclass
class Rule:
    name: str
    code: str
    summary: str
    path: str
    init: Optional[RuleItem] = None
    forward: Optional[RuleItem] = None
    guards: list[str] = field(default_factory=list)
    sequential: Optional[str] = None  # drop-in replacement for an nn.Sequential whose elements match
    # `container "$attend $drop"`: these layers may be all the elements of one nn.Sequential the code calls, in this
    # order; the target then receives that container as the first variable, the others left out (ADP010: MaxViT's
    # `nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(p))`, passed as `softmax=`, which the kernel calls).
    container: tuple[str, ...] = ()
    # `fallback original`: where paths that read the match's intermediates are told apart by simple conditions
    # (`if output_attentions:`), the region runs as written under those conditions and fused otherwise.
    fallback: Optional[str] = None
    # `uncertain guarded`: the target's kernel checks the modules it receives at run time and computes the source
    # expression for any others, so layers whose type is only possible or unknown (init_bindings.py) may match too.
    uncertain: Optional[str] = None
    # `fast "..."`: where the target's fast path runs by default (the kernels' measured dispatch), shown by `list`
    # and `explain`; "none" where it runs the original computation everywhere unless forced.
    fast: Optional[str] = None
    variant: str = ""  # label of this variant (`variant "..."`); "" for a rule written without variants
    alternatives: tuple["Rule", ...] = ()  # the file's further variants, tried after this one (same header)
    header_locations: dict[str, tuple[int, int]] = field(default_factory=dict)  # "code"/"rule" -> (line, col)


# ---------------------------------------------------------------------------------------------- lexer

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r]+)
  | (?P<comment>\#[^\n]*)
  | (?P<nl>\n)
  | (?P<arrow>->|→)
  | (?P<implies>=>|⇒)
  | (?P<pow>\*\*)
  | (?P<var>\$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
  | (?P<string>"[^"\n]*"|'[^'\n]*')
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_*][A-Za-z0-9_]*)*|\*\.[A-Za-z_][A-Za-z0-9_]*|\*\.\*)
  | (?P<punct>[()\[\],;:=|+\-@/*?])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int
    col: int


def _var(tok: Token) -> Var:
    return Var(tok.text[1:], tok.line, tok.col)


def _tokenize(text: str, path: str) -> list[Token]:
    tokens: list[Token] = []
    line, line_start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise RuleSyntaxError(path, line, pos - line_start + 1, f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind == "nl":
            tokens.append(Token("nl", "\n", line, pos - line_start + 1))
            line, line_start = line + 1, m.end()
        elif kind not in ("ws", "comment"):
            tokens.append(Token(kind, m.group(), line, pos - line_start + 1))
        pos = m.end()
    tokens.append(Token("eof", "", line, pos - line_start + 1))
    return tokens


# ---------------------------------------------------------------------------------------------- parser

CODE_PATTERN = re.compile(r"[A-Z]+[0-9]+")  # ADP005; user rules may use a prefix of their own
_HEADER_KEYS = ("rule", "code", "summary", "guard", "sequential", "container", "fallback", "uncertain", "fast")
_CONTAINER_VAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_VARIANT = "variant"
_IN_PLACE = "in_place"
_SECTIONS = ("init", "forward")
_BINARY_OPS = ("+", "-", "*", "/", "@")


class _Parser:
    def __init__(self, text: str, path: str) -> None:
        self.path = path
        self.tokens = _tokenize(text, path)
        self.i = 0

    # -- token helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def error(self, message: str, tok: Optional[Token] = None) -> RuleSyntaxError:
        tok = tok or self.tok
        found = "end of file" if tok.kind == "eof" else ("end of line" if tok.kind == "nl" else repr(tok.text))
        return RuleSyntaxError(self.path, tok.line, tok.col, f"{message}, found {found}")

    def skip_newlines(self) -> None:
        while self.tok.kind == "nl":
            self.i += 1

    def accept(self, text: str) -> bool:
        self.skip_newlines()
        if self.tok.text == text and self.tok.kind in ("punct", "arrow", "implies", "pow"):
            self.i += 1
            return True
        return False

    def expect(self, text: str, what: str) -> Token:
        self.skip_newlines()
        tok = self.tok
        if tok.text != text:
            raise self.error(f"expected {what}")
        self.i += 1
        return tok

    # -- file
    def parse_file(self) -> Rule:
        header: dict[str, str] = {}
        where: dict[str, tuple[int, int]] = {}  # header key -> (line, col) of its value
        guards: list[str] = []
        sections: dict[str, RuleItem] = {}
        variants: list[tuple[str, Token, dict[str, RuleItem]]] = []  # (label, `variant` token, sections)
        while True:
            self.skip_newlines()
            tok = self.tok
            if tok.kind == "eof":
                break
            if tok.kind != "name":
                raise self.error("expected a header line (rule/code/summary/guard) or a section (init:/forward:)")
            if tok.text in _SECTIONS:
                self.i += 1
                if self.tok.text != ":":
                    raise self.error(f"expected ':' after '{tok.text}'")
                self.i += 1
                if tok.text in sections:
                    raise RuleSyntaxError(self.path, tok.line, tok.col, f"duplicate section '{tok.text}:'")
                sections[tok.text] = self.parse_item(tok)
            elif tok.text == _VARIANT:
                self.i += 1
                quoted = self.tok
                if quoted.kind != "string":
                    raise self.error("expected a quoted label after 'variant'")
                self.i += 1
                if sections and not variants:
                    raise RuleSyntaxError(
                        self.path, tok.line, tok.col, "sections before the first 'variant' line: label them too"
                    )
                sections = {}
                variants.append((quoted.text[1:-1], tok, sections))
            elif tok.text in _HEADER_KEYS:
                self.i += 1
                value = self.tok
                if value.kind not in ("name", "string"):
                    raise self.error(f"expected a value after '{tok.text}'")
                self.i += 1
                if self.tok.kind not in ("nl", "eof"):
                    raise self.error(f"expected end of line after the '{tok.text}' value")
                text = value.text[1:-1] if value.kind == "string" else value.text
                if tok.text == "guard":
                    guards.append(text)
                elif tok.text in header:
                    raise RuleSyntaxError(self.path, tok.line, tok.col, f"duplicate header '{tok.text}'")
                else:
                    header[tok.text] = text
                    where[tok.text] = (value.line, value.col)
            else:
                raise self.error("expected a header line (rule/code/summary/guard) or a section (init:/forward:)")
        for key in ("rule", "code"):
            if key not in header:
                raise RuleSyntaxError(self.path, 1, 1, f"missing header line '{key} ...'")
        if header.get("fallback", "original") != "original":
            raise RuleSyntaxError(
                self.path, *where["fallback"], f"'fallback' takes the value 'original', found {header['fallback']!r}"
            )
        if header.get("uncertain", "guarded") != "guarded":
            raise RuleSyntaxError(
                self.path, *where["uncertain"], f"'uncertain' takes the value 'guarded', found {header['uncertain']!r}"
            )
        container: tuple[str, ...] = ()
        if "container" in header:
            words = header["container"].split()
            bad = [w for w in words if not _CONTAINER_VAR.fullmatch(w)]
            if not words or bad:
                raise RuleSyntaxError(
                    self.path, *where["container"],
                    "'container' takes a quoted list of layer variables (\"$softmax $dropout\"), "
                    f"found {header['container']!r}",
                )
            container = tuple(w[1:] for w in words)
        if not CODE_PATTERN.fullmatch(header["code"]):
            raise RuleSyntaxError(
                self.path, *where["code"], f"a rule code is capital letters then digits (ADP005, MY100), found {header['code']!r}"
            )
        rules = []
        for label, tok, group in variants or [("", self.tok, sections)]:
            init = group.get("init")
            if "forward" not in group and (init is None or init.target is None):
                in_variant = f" in variant {label!r}" if label else ""
                raise RuleSyntaxError(
                    self.path,
                    tok.line,
                    1,
                    f"missing section 'forward:'{in_variant} (only a rewriting 'init:' may stand alone)",
                )
            rule = Rule(
                name=header["rule"],
                code=header["code"],
                summary=header.get("summary", ""),
                path=self.path,
                init=init,
                forward=group.get("forward"),
                guards=guards,
                sequential=header.get("sequential"),
                container=container,
                fallback=header.get("fallback"),
                uncertain=header.get("uncertain"),
                fast=header.get("fast"),
                variant=label,
                header_locations=where,
            )
            _check_rule(rule)
            rules.append(rule)
        layers = {v.name for r in rules if r.init is not None for n in r.init.source for v in getattr(n, "outputs", ())}
        for name in container:
            if name not in layers:
                raise RuleSyntaxError(
                    self.path, *where["container"], f"'container' names ${name}, which no 'init:' section binds"
                )
        rules[0].alternatives = tuple(rules[1:])
        return rules[0]

    def parse_item(self, section: Token) -> RuleItem:
        source = self.parse_sequence()
        target: Optional[list[Node]] = None
        self.skip_newlines()
        if self.tok.kind == "implies":
            self.i += 1
            target = self.parse_sequence()
        elif section.text == "forward":
            raise self.error("expected '=>' and a target pattern in 'forward:'")
        return RuleItem(source=tuple(source), target=tuple(target) if target is not None else None, line=section.line)

    def parse_sequence(self) -> list[Node]:
        nodes = [self.parse_node()]
        while self.accept(";"):
            nodes.append(self.parse_node())
        return nodes

    def parse_node(self) -> Node:
        self.skip_newlines()
        tok = self.tok
        if tok.text == "*" and tok.kind == "punct":
            self.i += 1
            return Wildcard()
        if tok.text == "?" and tok.kind == "punct":
            self.i += 1
            node = self.parse_node()
            if isinstance(node, Wildcard) or node.optional or not (
                node.operands if isinstance(node, OpNode) else node.args.positional
            ):
                raise RuleSyntaxError(
                    self.path, tok.line, tok.col, "'?' marks a node with a first operand or positional argument"
                )
            first = node.operands[0] if isinstance(node, OpNode) else node.args.positional[0]
            if not isinstance(first, Var) or len(node.outputs) != 1:
                raise RuleSyntaxError(self.path, tok.line, tok.col, "an optional node passes a $variable through to one output")
            return dataclasses.replace(node, optional=True)
        if tok.text == "-" and tok.kind == "punct":  # unary minus
            self.i += 1
            operand = self.parse_atom()
            return OpNode("neg", (operand,), self.parse_outputs())
        if tok.kind == "var":
            self.i += 1
            nxt = self.tokens[self.i]
            if nxt.text == ":":  # `$cls:Type(...)` or `$cls:(A | B)(...)`
                self.i += 1
                types = self.parse_type_choice() if self.accept("(") else [self.parse_type_name()]
                node = self.parse_typed_call(types, consumed=True)
                return CallNode(node.types, None, node.args, node.outputs, node.subscript, type_var=_var(tok))
            if nxt.text == "(":
                self.i += 1
                args = self.parse_args(")")
                return CallNode((), _var(tok), args, self.parse_outputs())
            if nxt.text in _BINARY_OPS:
                self.i += 1
                right = self.parse_atom()
                return OpNode(nxt.text, (_var(tok), right), self.parse_outputs())
            raise self.error("expected '(' (layer call) or an operator after a variable", nxt)
        if tok.kind in ("name", "number", "string"):
            if tok.kind == "name" and self.tokens[self.i + 1].text in ("(", "["):
                return self.parse_typed_call([tok.text])
            left = self.parse_atom()
            op = self.tok
            if op.text not in _BINARY_OPS:
                raise self.error("expected an operator or a call")
            self.i += 1
            right = self.parse_atom()
            return OpNode(op.text, (left, right), self.parse_outputs())
        if tok.text == "(":
            self.i += 1
            return self.parse_typed_call(self.parse_type_choice(), consumed=True)
        raise self.error("expected a pattern node")

    def parse_type_choice(self) -> list[str]:
        """The types of a choice ``(A | B)``, after its opening parenthesis."""
        types = [self.parse_type_name()]
        while self.accept("|"):
            types.append(self.parse_type_name())
        self.expect(")", "')' closing the type choice")
        return types

    def parse_type_name(self) -> str:
        self.skip_newlines()
        tok = self.tok
        if tok.kind != "name":
            raise self.error("expected a type name")
        self.i += 1
        return tok.text

    def parse_typed_call(self, types: list[str], consumed: bool = False) -> CallNode:
        if not consumed:
            self.i += 1  # the type name
        if self.accept("["):
            args = self.parse_args("]")
            return CallNode(tuple(types), None, args, self.parse_outputs(), subscript=True)
        self.expect("(", "'(' after the type name")
        args = self.parse_args(")")
        if self.tok.text == "(":  # `factory($cls)(args)`
            self.i += 1
            return CallNode(tuple(types), None, self.parse_args(")"), self.parse_outputs(), callee_args=args)
        return CallNode(tuple(types), None, args, self.parse_outputs())

    def parse_args(self, closer: str) -> Args:
        positional: list[Atom] = []
        keywords: list[tuple[str, Atom]] = []
        rest: Optional[Var] = None
        while not self.accept(closer):
            if positional or keywords or rest:
                self.expect(",", f"',' or '{closer}'")
                if self.accept(closer):
                    break
            self.skip_newlines()
            tok = self.tok
            if tok.kind == "pow":
                self.i += 1
                var = self.tok
                if var.kind != "var":
                    raise self.error("expected a variable after '**'")
                self.i += 1
                rest = _var(var)
            elif tok.kind == "name" and self.tokens[self.i + 1].text == "=":
                self.i += 2
                keywords.append((tok.text, self.parse_atom()))
            else:
                if keywords or rest:
                    raise self.error("positional argument after keyword arguments", tok)
                positional.append(self.parse_atom())
        return Args(tuple(positional), tuple(keywords), rest)

    def parse_atom(self) -> Atom:
        self.skip_newlines()
        tok = self.tok
        self.i += 1
        if tok.kind == "var":
            return _var(tok)
        if tok.kind == "number":
            return Const(float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text))
        if tok.kind == "string":
            return Const(tok.text[1:-1])
        if tok.kind == "name" and tok.text in ("True", "False", "None"):
            return Const({"True": True, "False": False, "None": None}[tok.text])
        if tok.kind == "name" and tok.text == _IN_PLACE and self.tok.text == "(":
            self.i += 1
            var = self.tok
            if var.kind != "var":
                raise self.error(f"expected a $variable in '{_IN_PLACE}(...)'")
            self.i += 1
            self.expect(")", f"')' closing '{_IN_PLACE}('")
            return InPlace(_var(var))
        self.i -= 1
        raise self.error("expected a $variable or a constant")

    def parse_outputs(self) -> tuple[Var, ...]:
        self.skip_newlines()
        if self.tok.kind != "arrow":
            raise self.error("expected '->' and an output variable")
        self.i += 1
        self.skip_newlines()
        if self.accept("("):
            outs = [self.parse_output_var()]
            while self.accept(","):
                outs.append(self.parse_output_var())
            self.expect(")", "')' closing the output tuple")
            return tuple(outs)
        return (self.parse_output_var(),)

    def parse_output_var(self) -> Var:
        self.skip_newlines()
        tok = self.tok
        if tok.kind != "var":
            raise self.error("expected an output $variable")
        self.i += 1
        return _var(tok)


def _check_rule(rule: Rule) -> None:
    """Semantic checks a reader of the rule would expect to be caught at load time, located at the variable at
    fault where there is one (else at the section)."""

    def fail(item: RuleItem, message: str, var: Optional[Var] = None) -> RuleSyntaxError:
        if var is not None and var.line:
            return RuleSyntaxError(rule.path, var.line, var.col, message)
        return RuleSyntaxError(rule.path, item.line, 1, message)

    init_outputs: set[str] = set()
    if rule.init is not None:
        for node in rule.init.source:
            if not isinstance(node, CallNode) or node.layer is not None:
                raise fail(rule.init, "'init:' source patterns must be layer instantiations `Type(...) -> $layer`")
            init_outputs.update(v.name for v in node.outputs)
        init_vars = set().union(*(_vars_of(n) for n in rule.init.source))
        if rule.init.target is not None:
            for node in rule.init.target:
                if not isinstance(node, CallNode) or len(node.outputs) != 1:
                    raise fail(rule.init, "'init:' targets must be `Type(...) -> $layer`")
                out = node.outputs[0]
                if out.name not in init_outputs:
                    raise fail(rule.init, f"'init:' target output ${out.name} is not a source layer", out)
                for var in _var_atoms(node):
                    if var.name not in init_vars:
                        raise fail(rule.init, f"'init:' target variable ${var.name} is not bound by the source pattern", var)
    forward = rule.forward
    if forward is None:
        if rule.container:
            line, col = rule.header_locations.get("container", (1, 1))
            raise RuleSyntaxError(rule.path, line, col, "'container' needs a 'forward:' section that calls the layers")
        return
    assert forward.target is not None
    bound: set[str] = set(init_outputs)
    for node in forward.source:
        if isinstance(node, CallNode) and node.layer is not None and node.layer.name not in init_outputs:
            raise fail(forward, f"layer ${node.layer.name} is called in 'forward:' but not bound in 'init:'", node.layer)
        bound.update(_vars_of(node))
    if len(forward.target) != 1 or not isinstance(forward.target[0], CallNode):
        raise fail(forward, "a 'forward:' target must be exactly one call node")
    for var in _var_atoms(forward.target[0]):
        if var.name not in bound:
            raise fail(forward, f"target variable ${var.name} is not bound by the source pattern", var)
    if any(getattr(n, "optional", False) for n in [*forward.target, *(rule.init.source if rule.init else ())]):
        raise fail(forward, "'?' (optional) marks forward source nodes only")
    # Variables bound only by optional nodes (other than their pass-through outputs) may stay unbound: the target
    # may name them as keyword arguments only, which are then left out.
    always = set(init_outputs) - _optional_only_layers(forward)
    for node in forward.source:
        if isinstance(node, (CallNode, OpNode)) and not node.optional:
            always.update(_vars_of(node))
        elif isinstance(node, (CallNode, OpNode)):
            always.update(v.name for v in node.outputs)
    target = forward.target[0]
    assert isinstance(target, CallNode)
    for atom in target.args.positional:
        if isinstance(atom, Var) and atom.name not in always:
            raise fail(forward, f"target variable ${atom.name} may be unbound (optional node): pass it by keyword", atom)
    _check_in_place(rule, forward, target, fail)
    _check_container(rule, init_outputs, target)


def _check_in_place(
    rule: Rule, forward: RuleItem, target: CallNode, fail: Callable[[RuleItem, str, Optional[Var]], RuleSyntaxError]
) -> None:
    """``in_place($s)`` only as a forward target's keyword argument, ``$s`` the output of an operator step."""
    item_nodes = [(item, n) for item in (rule.init, forward) if item is not None for n in (*item.source, *(item.target or ()))]
    for item, node in item_nodes:
        if node is target:
            args = node.args
            misplaced = [a for a in args.positional if isinstance(a, InPlace)]
            if node.callee_args is not None:
                misplaced += [a for a in node.callee_args.positional if isinstance(a, InPlace)]
        elif isinstance(node, CallNode):
            misplaced = [a for a in (*node.args.positional, *(a for _, a in node.args.keywords)) if isinstance(a, InPlace)]
        elif isinstance(node, OpNode):
            misplaced = [a for a in node.operands if isinstance(a, InPlace)]
        else:
            misplaced = []
        if misplaced:
            raise fail(item, f"'{_IN_PLACE}(...)' is a forward target's keyword argument only", misplaced[0].var)
    operator_outputs = {v.name for n in forward.source if isinstance(n, OpNode) for v in n.outputs}
    for _, atom in target.args.keywords:
        if isinstance(atom, InPlace) and atom.var.name not in operator_outputs:
            raise fail(forward, f"'{_IN_PLACE}(${atom.var.name})': ${atom.var.name} is no operator step's output", atom.var)


def _check_container(rule: Rule, init_outputs: set[str], target: CallNode) -> None:
    """The target receives the container as the first layer of the `container` header and leaves the others out,
    so those may only be keyword arguments of it (a variant that binds none of them ignores the header)."""
    if not rule.container:
        return
    line, col = rule.header_locations.get("container", (1, 1))
    if rule.sequential is not None:
        raise RuleSyntaxError(rule.path, line, col, "'container' and 'sequential' exclude each other")
    if rule.init is not None and rule.init.target is not None:
        raise RuleSyntaxError(rule.path, line, col, "'container' passes the layers on: 'init:' cannot rewrite them")
    for atom in [target.layer, *target.args.positional]:
        if isinstance(atom, Var) and atom.name in rule.container[1:]:
            raise RuleSyntaxError(
                rule.path, line, col,
                f"'container' leaves ${atom.name} out of the target: pass it by keyword, not as the callee or by position",
            )


def _var_atoms(node: Node) -> list[Var]:
    """Every variable a node mentions, in source order (outputs last)."""
    out: list[Var] = []
    if isinstance(node, CallNode):
        if node.type_var is not None:
            out.append(node.type_var)
        if node.layer is not None:
            out.append(node.layer)
        for args in (node.callee_args, node.args):
            if args is not None:
                out += [a for a in (*args.positional, *(a for _, a in args.keywords)) if isinstance(a, Var)]
                if args.rest is not None:
                    out.append(args.rest)
    elif isinstance(node, OpNode):
        out += [a for a in node.operands if isinstance(a, Var)]
    out += node.outputs if isinstance(node, (CallNode, OpNode)) else ()
    return out


def _optional_only_layers(forward: RuleItem) -> set[str]:
    """Layer variables called by optional nodes only."""
    calls = [n for n in forward.source if isinstance(n, CallNode) and n.layer is not None]
    return {n.layer.name for n in calls if all(m.optional for m in calls if m.layer == n.layer)}  # type: ignore[union-attr]


def _vars_of(node: Node) -> set[str]:
    return {v.name for v in _var_atoms(node)}


def parse_rule(text: str, path: str = "<rule>") -> Rule:
    """Parse one rule file's text; raises :class:`RuleSyntaxError` naming path, line and column."""
    return _Parser(text, path).parse_file()


def load_rule_file(path: Path) -> Rule:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RuleSyntaxError(str(path), 1, 1, f"not UTF-8 text ({exc.reason})") from None
    return parse_rule(text, str(path))

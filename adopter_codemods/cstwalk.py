"""Fast read-only traversal of LibCST trees.

LibCST's visitor machinery (``node.visit(...)``, ``node.children``) rebuilds and validates every node it passes and
dispatches through ``getattr`` per node: one pass over a module costs about as much as parsing it (docs/DESIGN.md §5
budget: all rules together within 1.5x the parse). Reading the dataclass fields that can hold syntax directly
(whitespace, parentheses and punctuation skipped) visits the same nodes, in source order, about 20x faster.

``tests/test_cstwalk.py`` checks node sets and order against ``CSTVisitor`` on the transformers corpus.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Optional

import libcst as cst

# Fields that only hold whitespace, comments, brackets, punctuation or formatting flags (never a name or a call).
_TRIVIA = frozenset(
    {
        "asynchronous",
        "colon",
        "comma",
        "default_indent",
        "default_newline",
        "dot",
        "empty_lines",
        "encoding",
        "equal",
        "first_colon",
        "footer",
        "has_trailing_newline",
        "header",
        "indent",
        "lbrace",
        "lbracket",
        "leading_lines",
        "lines_after_decorators",
        "lpar",
        "newline",
        "operator",
        "posonly_ind",
        "rbrace",
        "rbracket",
        "relative",
        "rpar",
        "second_colon",
        "semicolon",
        "trailing_whitespace",
    }
)
# Node types whose dataclass field order differs from source order (field names in source order).
_SOURCE_ORDER: dict[type, tuple[str, ...]] = {
    cst.IfExp: ("body", "test", "orelse"),
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.Param: ("name", "annotation", "default"),
    cst.Parameters: ("posonly_params", "params", "star_arg", "kwonly_params", "star_kwarg"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.Arg: ("keyword", "value"),
    cst.Subscript: ("value", "slice"),
    cst.MatchCase: ("pattern", "guard", "body"),
    cst.TypeAlias: ("name", "type_parameters", "value"),
}
_FIELDS: dict[type, tuple[str, ...]] = {}
_NOT_NODES = (str, bool, Optional[str])  # field annotations that never hold a node (`Name.value`)


def _fields(node_type: type) -> tuple[str, ...]:
    fields = _FIELDS.get(node_type)
    if fields is None:
        order = _SOURCE_ORDER.get(node_type)
        plain = {f.name for f in dataclasses.fields(node_type) if f.type in _NOT_NODES}
        names = order if order is not None else tuple(f.name for f in dataclasses.fields(node_type))
        fields = _FIELDS[node_type] = tuple(
            n for n in names if n not in _TRIVIA and n not in plain and not n.startswith(("whitespace", "leading_whitespace"))
        )
    return fields


_ALL_FIELDS: dict[type, tuple[str, ...]] = {}


def all_fields(node_type: type) -> tuple[str, ...]:
    """Every field of a node type that may hold a node, whitespace and punctuation included (where newlines and
    comments live), in declaration order; per type, not per node."""
    fields = _ALL_FIELDS.get(node_type)
    if fields is None:
        fields = _ALL_FIELDS[node_type] = tuple(f.name for f in dataclasses.fields(node_type) if f.type not in _NOT_NODES)
    return fields


_IS_NODE: dict[type, bool] = {}


def is_node(kind: type) -> bool:
    """``issubclass(kind, CSTNode)``, memoised: CSTNode is an ABC, so isinstance checks against it are slow."""
    answer = _IS_NODE.get(kind)
    if answer is None:
        answer = _IS_NODE[kind] = issubclass(kind, cst.CSTNode)
    return answer


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Direct syntax children in source order (no whitespace, brackets or punctuation nodes)."""
    for name in _fields(type(node)):
        value = getattr(node, name)
        if is_node(type(value)):
            yield value
        elif type(value) is tuple or type(value) is list:
            for item in value:
                if is_node(type(item)):
                    yield item


# Nodes without syntax children, which most walks look at only through their parents: `walk(..., prune=LEAVES)`.
LEAVES = frozenset({cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.FormattedStringText, cst.Ellipsis})


def walk(
    root: cst.CSTNode,
    descend: Optional[Callable[[cst.CSTNode], bool]] = None,
    prune: frozenset[type] = frozenset(),
) -> Iterator[cst.CSTNode]:
    """Pre-order walk in source order, `root` included; where `descend(node)` is False its children are skipped;
    nodes of the types in `prune` (below the root) are neither yielded nor descended into."""
    stack = [root]
    pop, extend, fields_of, field_map, known = stack.pop, stack.extend, _fields, _FIELDS, _IS_NODE
    while stack:
        node = pop()
        yield node
        if descend is not None and not descend(node):
            continue
        kind = type(node)
        fields = field_map.get(kind)
        if fields is None:
            fields = fields_of(kind)
        if not fields:
            continue
        kids = []  # `children(node)` inlined: this loop is the hot path of every scan
        for name in fields:
            value = getattr(node, name)
            value_kind = type(value)
            if value_kind is tuple or value_kind is list:
                for item in value:
                    item_kind = type(item)
                    if (known.get(item_kind) or (item_kind not in known and is_node(item_kind))) and item_kind not in prune:
                        kids.append(item)
            elif (known.get(value_kind) or (value_kind not in known and is_node(value_kind))) and value_kind not in prune:
                kids.append(value)
        if len(kids) > 1:
            kids.reverse()
        extend(kids)

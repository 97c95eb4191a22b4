"""Run rules over one parsed module: findings for reports, rewritten modules for codemods.

This is the one place that ties parser, provider, matcher and rewriter together. Every front-end (codemods, Fixit
rules, ``scan``/``rewrite``, pre-commit, the Python API) and benchmark starts with one entry point, which parses
with the crash screen (when given text), builds the model structure and matches the rules once:
:func:`analyse_file` (a path), :func:`analyse_source` (source text or bytes) or :func:`analyse` (a module LibCST
or Fixit already parsed). The :class:`Analysis` it returns gives the findings (with positions), the skipped
units and the rewritten module, each computed on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Union

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from . import cstwalk, files
from .dsl import Rule
from .gc_pause import collector_paused
from .init_bindings import ANONYMOUS_CONTAINER
from .matcher import (
    Certainty, LayerRef, Match, PlacedMatch, Reason, Refusal, RefusalCategory, find_matches, helper_callers_checked,
    may_match,
)
from .positions import definition_lines, statement_positions
from .provider import build_module_structure
from .rewriter import EditPlan, RewriteError, apply_plan, merge_plans, plan_match
from .structure import ModuleStructure
from .suppression import file_suppressed
from .undefined_names import new_undefined_names
from .unused_imports import remove_imports_left_unused

MAX_ROUNDS = 8  # rewrites that overlap another one are applied in a later round


@dataclass(frozen=True)
class Finding:
    """One rewrite site. ``line``/``end_line`` are 1-based lines of the first/last matched statement."""

    code: str
    rule: str
    path: str
    cls: str
    function: str
    line: int
    end_line: int
    message: str
    fixable: bool = True
    # "exact": the layer types are certain; "guarded": some is only possible or unknown (`norm_layer(planes)`), and
    # the rewrite calls a kernel that checks the modules at run time and computes the original code otherwise.
    certainty: Certainty = "exact"
    # 1-based column where the first matched statement starts and (exclusive) where the last one ends, for
    # text/SARIF/Fixit positions; not part of the JSON contract (docs/DESIGN.md §6).
    col: int = 1
    end_col: int = 1

    def to_json(self) -> dict[str, object]:
        return {
            "code": self.code,
            "rule": self.rule,
            "path": self.path,
            "class": self.cls,
            "function": self.function,
            "line": self.line,
            "end_line": self.end_line,
            "message": self.message,
            "fixable": self.fixable,
            "certainty": self.certainty,
        }


@dataclass(frozen=True)
class Skip:
    """A class or function the engine did not analyse, so no rule was matched in it (``function`` is None when the
    whole class was skipped; ``cls`` is "" for a top-level function). ``line``: its ``class``/``def`` line."""

    path: str
    cls: str
    function: Optional[str]
    line: int
    reason: str

    @property
    def unit(self) -> str:
        """``class GPT2Model``, ``function GPT2Model.generate`` or ``function helper``."""
        if self.function is None:
            return f"class {self.cls}"
        return f"function {self.cls + '.' if self.cls else ''}{self.function}"

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "class": self.cls, "function": self.function, "line": self.line, "reason": self.reason}


@dataclass(frozen=True)
class RefusedSite:
    """A site a rule matched structurally but refused (``scan --show-refused``): where it is reported (as a finding
    would be), the reason category and sentence, and the line of the cause (None when the check names none)."""

    code: str
    rule: str
    path: str
    cls: str
    function: str
    line: int
    end_line: int
    category: RefusalCategory
    reason: str
    cause_line: Optional[int] = None
    # As Finding's: for text and SARIF positions, not part of the JSON contract.
    col: int = 1
    end_col: int = 1
    cause_col: int = 1

    def to_json(self) -> dict[str, object]:
        return {
            "code": self.code,
            "rule": self.rule,
            "path": self.path,
            "class": self.cls,
            "function": self.function,
            "line": self.line,
            "end_line": self.end_line,
            "category": self.category.value,
            "reason": self.reason,
            "cause_line": self.cause_line,
        }


@collector_paused
def find_all(
    structure: ModuleStructure, rules: Sequence[Rule], refusals: Optional[list[Refusal]] = None
) -> list[PlacedMatch]:
    """Every safe match of every rule, each rule judged on the unmodified module. Sites silenced by a suppression
    comment are left out here (see :mod:`.suppression`), so no front-end reports or rewrites them.

    With a `refusals` list, also appends the sites each rule matched structurally but refused (silenced ones
    included, as :attr:`RefusalCategory.SUPPRESSED`; a rule silenced for the whole file is not run at all)."""
    matches: list[PlacedMatch] = []
    _split_guarded_ifs(structure, rules)
    confirm_sink = SinkCheck(structure, rules)
    for rule in rules:
        if file_suppressed(structure.module, (rule.code, rule.name)):
            continue
        found: list[PlacedMatch] = []
        for cls in structure.classes:
            found.extend(find_matches(rule, cls, refusals, confirm_sink))
        matches.extend(helper_callers_checked(found, refusals))
    return matches


def _split_guarded_ifs(structure: ModuleStructure, rules: Sequence[Rule]) -> None:
    """Before any class is walked: whether its walk splits the ``if``s a fallback rule may absorb."""
    fallback = [v for rule in rules for v in (rule, *rule.alternatives) if v.fallback and v.forward is not None]
    for cls in structure.classes:
        cls.split_guarded_ifs = any(may_match(v, cls) for v in fallback)


class SinkCheck:
    """Why the next round would not fuse a match that plan "sink" (sink.py) copies into an ``if``'s arms, None when
    it would: with the copies made, the rule must place a match there with the same layers and the same last
    statement (the copies leave the arms' own statements as they are, the very nodes). The copied module is analysed
    once per ``if``. The reason given is the one the copied code's match is refused for, else why the match could
    not be placed where it stands."""

    def __init__(self, structure: ModuleStructure, rules: Sequence[Rule], depth: int = 0) -> None:
        self.structure = structure
        self.rules = rules
        self.depth = depth  # 1: checking the copies of a sink, whose next round may sink once more
        self.sunk: dict[tuple[int, ...], ModuleStructure] = {}
        # (if, rule, class) -> the class in the copied module, its placed matches and refusals there
        self.found: dict[
            tuple[tuple[int, ...], str, str], tuple[Optional[cst.ClassDef], list[PlacedMatch], list[Refusal]]
        ] = {}

    def __call__(self, found: PlacedMatch) -> Optional[Reason]:
        placement = found.placement
        assert placement.anchor is not None and placement.branch_if is not None and placement.unsunk is not None
        key = (id(placement.branch_if), *(id(line) for line in placement.prefix_lines))
        sunk = self.sunk.get(key)
        if sunk is None:
            # only the class changes (a top-level statement: the file's functions form a unit without one)
            top = found.match.cls.node
            module = apply_plan(self.structure.module, plan_match(found), top if isinstance(top, cst.ClassDef) else None)
            sunk = build_module_structure(module, previous=self.structure, only=found.match.cls.name)
            self.sunk[key] = sunk
            _split_guarded_ifs(sunk, self.rules)
        # the rule as run, with all its variants: another variant may be the one that matches the copied code
        rule = next((r for r in self.rules if r.code == found.match.rule.code), found.match.rule)
        name = found.match.cls.name
        done = self.found.get((key, rule.code, name))
        if done is None:
            cls = next((c for c in sunk.classes if c.name == name), None)
            refused: list[Refusal] = []
            # A suffix copied first leaves a prefix to copy (sink.py): one more sink is confirmed in its turn.
            deeper = SinkCheck(sunk, self.rules, self.depth + 1) if self.depth == 0 else None
            placed = find_matches(rule, cls, refused, deeper) if cls is not None else []
            done = self.found[(key, rule.code, name)] = (cls.node if cls is not None else None, placed, refused)
        sunk_class, placed, refusals = done
        layers = {n.layer for n in found.match.nodes}
        # a statement of the arm, which the copies leave as it is (the anchor, unless the copied lines follow the `if`)
        line = next(n for n in reversed(found.match.nodes) if n.site.owner is placement.branch_owner).site.line
        if any(
            {n.layer for n in p.match.nodes} == layers and any(n.site.line is line for n in p.match.nodes)
            for p in placed
        ):
            return None
        refusal = next((r for r in refusals if any(s is line for s in r.statements)), None)
        if refusal is None:
            return placement.unsunk
        where = "after" if placement.suffix else "before"
        reason = refusal.reason
        inner = "even with the statements before the `if` copied into its arms: "
        if reason.startswith(inner):  # the copies' own sink refused: both copies named once
            where, reason = f"{where} and before", reason[len(inner):]
        return Reason(
            refusal.category,
            f"even with the statements {where} the `if` copied into its arms: {reason}",
            _original_node(refusal.cause, found, sunk_class),
        )


def _original_node(
    cause: Optional[cst.CSTNode], found: PlacedMatch, sunk_class: Optional[cst.ClassDef]
) -> Optional[cst.CSTNode]:
    """Where a refusal in the copied module points in the original, for the report's line: the node itself where
    the copies left it as it was, else the moved line a copy holding it was made from."""
    original_class = found.match.cls.node
    if cause is None or original_class is None or sunk_class is None:
        return None
    if any(n is cause for n in cstwalk.walk(original_class)):
        return cause
    empty = cst.Module([])
    code = {empty.code_for_node(line.with_changes(leading_lines=())): line for line in found.placement.prefix_lines}  # type: ignore[attr-defined]
    for line in cstwalk.walk(sunk_class):
        if isinstance(line, cst.SimpleStatementLine) and any(n is cause for n in cstwalk.walk(line)):
            return code.get(empty.code_for_node(line.with_changes(leading_lines=())))
    return None


GUARDED_NOTE = (
    "guarded: a layer type is not certain, so the kernel checks the modules at run time and computes the original "
    "code for any others"
)


def describe(match: Match) -> str:
    layers = [_layer_name(b.attr) for b in match.env.values() if isinstance(b, LayerRef)]
    detail = f" ({', '.join(dict.fromkeys(layers))})" if layers else ""
    return f"{match.rule.summary or match.rule.name}{detail}"


def _layer_name(attr: str) -> str:
    """``self.<attr>``; an element of an nn.Sequential no attribute holds as ``nn.Sequential[<index>]``."""
    head, _, index = attr.partition(".")
    return f"nn.Sequential[{index}]" if head == ANONYMOUS_CONTAINER and index else f"self.{attr}"


@collector_paused
def findings_for(
    module: cst.Module,
    matches: Sequence[PlacedMatch],
    path: str,
    source: Optional[bytes] = None,
) -> list[Finding]:
    """Findings with line numbers; computes positions only when there is something to report (faster when the
    module's `source` bytes are given: see :func:`positions.statement_positions`)."""
    if not matches:
        return []
    positions = _positions(module, matches, source)
    out = []
    seen: set[tuple[object, ...]] = set()
    outer = _enclosing_matches(matches)
    lines: dict[int, int] = {}
    for found in sorted(matches, key=lambda f: id(f) in outer):  # the enclosing ones first: their lines are named
        m, placement = found.match, found.placement
        ranges = [positions[s] for s in _reported_nodes(found) if s in positions]
        first = min(ranges, key=lambda r: (r.start.line, r.start.column))
        last = max(ranges, key=lambda r: (r.end.line, r.end.column))
        line, end = first.start.line, last.end.line
        anchor = placement.anchor if placement.plan not in ("init", "container") else None
        if placement.plan == "container" and m.container is not None:
            function = m.container.where.split(".")[-1]  # where the nn.Sequential is built
        else:
            function = anchor.site.function.split(".")[-1] if anchor is not None else "__init__"
        lines[id(found)] = line
        message, fixable = describe(m), True
        enclosing = outer.get(id(found))
        if enclosing is not None:
            # `rewrite` applies the larger fusion and this match is gone with it (select_compatible), except from the
            # region a fallback keeps as written, where a later round rewrites it
            code, at = enclosing.match.rule.code, lines.get(id(enclosing), line)
            if enclosing.placement.plan == "fallback":
                message = (
                    f"{message}; inside the {code} match at line {at}, whose rewrite fuses it and rewrites it in the "
                    "copy kept as written for the conditions the fused call cannot serve"
                )
            else:
                message, fixable = f"{message}; inside the {code} match at line {at}, whose rewrite replaces it", False
        finding = Finding(
            m.rule.code, m.rule.name, path, m.cls.name, function, line, end, message, fixable=fixable,
            certainty=m.certainty, col=first.start.column + 1, end_col=last.end.column + 1,
        )
        # One site found in several classes (a helper they inherit, inlined in each forward) is one edit: one finding.
        site = (finding.code, line, finding.col, end, finding.end_col, finding.message)
        if site not in seen:
            seen.add(site)
            out.append(finding)
    out.sort(key=lambda f: (f.line, f.code))
    return out


def _enclosing_matches(matches: Sequence[PlacedMatch]) -> dict[int, PlacedMatch]:
    """id(match) -> a match whose calls strictly include its own (ADP004's softmax inside ADP010's attention,
    ADP006's gate and activation inside ADP012's gated MLP), for the matches that have one."""
    keyed = [(found, found.match.key()) for found in matches]
    return {
        id(found): next(other for other, wider in keyed if key < wider)
        for found, key in keyed
        if key and any(key < wider for _, wider in keyed)
    }


@collector_paused
def refusals_for(
    module: cst.Module, refusals: Sequence[Refusal], path: str, source: Optional[bytes] = None
) -> list[RefusedSite]:
    """:class:`RefusedSite` per refusal, positioned as :func:`findings_for` positions findings."""
    if not refusals:
        return []
    wanted = [n for r in refusals for n in (*r.statements, *((r.cause,) if r.cause is not None else ()))]
    tops = [s for s in module.body if isinstance(s, (cst.ClassDef, cst.FunctionDef))]
    positions: Mapping[cst.CSTNode, CodeRange] = statement_positions(module, tops, wanted, source)
    if not all(n in positions for n in wanted):  # a cause inside a statement (a `self.layer` reference)
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    out = []
    for r in refusals:
        ranges = [positions[s] for s in r.statements]
        first = min(ranges, key=lambda c: (c.start.line, c.start.column))
        last = max(ranges, key=lambda c: (c.end.line, c.end.column))
        cause = positions[r.cause] if r.cause is not None else None
        out.append(
            RefusedSite(
                r.code, r.rule, path, r.cls, r.function, first.start.line, last.end.line, r.category, r.reason,
                cause.start.line if cause is not None else None,
                col=first.start.column + 1, end_col=last.end.column + 1,
                cause_col=cause.start.column + 1 if cause is not None else 1,
            )
        )
    out.sort(key=lambda r: (r.line, r.code))
    return out


@collector_paused
def skips_for(structure: ModuleStructure, path: str, source: Optional[bytes] = None) -> list[Skip]:
    """The units of `structure` the walk gave up on (nesting too deep for its recursion). Read it after
    matching: classes are walked lazily, only where some rule needed their paths."""
    units = [(cls, node, reason) for cls in structure.classes for node, reason in cls.skipped]
    if not units:
        return []
    module = structure.module
    tops: list[cst.CSTNode] = [cls.node for cls, _, _ in units if cls.node is not None]
    tops += [node for cls, node, _ in units if cls.node is None]
    nodes = [node for _, node, _ in units]
    lines: Mapping[cst.CSTNode, int] = definition_lines(module, tops, nodes, source)
    if not all(n in lines for n in nodes):
        found = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        lines = {n: found[n].start.line for n in nodes}
    out = [
        Skip(
            path,
            cls.name,
            None if node is cls.node else node.name.value,  # type: ignore[attr-defined]
            lines[node],
            reason,
        )
        for cls, node, reason in units
    ]
    return sorted(out, key=lambda s: s.line)


def _reported_nodes(found: PlacedMatch) -> list[cst.CSTNode]:
    """The statements a finding spans: the matched forward statements, else the ``__init__`` bindings."""
    m = found.match
    smalls: list[cst.CSTNode] = [n.site.small for n in m.nodes]
    if not smalls or found.placement.plan == "container":
        smalls = [b.statement for b in m.init_matches.values() if b.statement is not None]
        if m.container is not None and m.container.statement is not None:
            smalls = [m.container.statement]
    return smalls


def _positions(
    module: cst.Module, matches: Sequence[PlacedMatch], source: Optional[bytes]
) -> Mapping[cst.CSTNode, CodeRange]:
    """Positions inside the top-level classes/functions holding the matches; PositionProvider renders the whole
    module (slower than parsing it), so it is the fallback for a node found nowhere else."""
    functions = {
        f.placement.anchor.site.function for f in matches if f.match.cls.node is None and f.placement.anchor is not None
    }
    tops: list[cst.CSTNode] = [f.match.cls.node for f in matches if f.match.cls.node is not None]
    tops += [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value in functions]
    reported = [s for m in matches for s in _reported_nodes(m)]
    positions = statement_positions(module, tops, reported, source)
    if all(s in positions for s in reported):
        return positions
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


def select_compatible(matches: Sequence[PlacedMatch]) -> tuple[list[EditPlan], list[PlacedMatch]]:
    """Plans for the matches that can be applied together, in order.

    Matches that edit the same ``__init__`` statement (two arms of an ``if`` sharing a Dropout and a LayerNorm)
    form a group applied all at once or not at all: applying half of it would delete a layer the other half still
    calls. A group is deferred to a later round when its forward edits overlap edits already chosen. A match whose
    calls are a strict part of another match's (ADP004's softmax inside ADP010's attention, ADP006's gate and
    activation inside ADP012's gated MLP) comes after it: the larger fusion is applied, and the smaller one, its
    calls gone, no longer matches in the next round.
    """
    planned: list[tuple[PlacedMatch, EditPlan]] = []
    for m in matches:
        try:
            planned.append((m, plan_match(m)))
        except RewriteError:
            continue
    groups: list[list[tuple[PlacedMatch, EditPlan]]] = []
    for item in planned:
        joined = [g for g in groups if any(item[1].init_statements & p.init_statements for _, p in g)]
        merged = [item]
        for g in joined:
            merged = g + merged
            groups.remove(g)
        groups.append(merged)
    inside = _enclosing_matches([m for m, _ in planned])  # strictly part of another match
    position = {id(item): n for n, item in enumerate(planned)}
    groups.sort(key=lambda g: (all(id(m) in inside for m, _ in g), min(position[id(i)] for i in g)))
    plans: list[EditPlan] = []
    chosen: list[PlacedMatch] = []
    touched: set[int] = set()
    for group in groups:
        footprints = [
            p.footprint() | _forward_sites(m) for m, p in group
        ]
        union: set[int] = set()
        clash = False
        for fp in footprints:
            clash = clash or bool(fp & union) or bool(fp & touched)
            union |= fp
        if clash or not _same_init_edits([p for _, p in group]):
            continue
        touched |= union | set().union(*(p.init_statements for _, p in group))
        plans.extend(p for _, p in group)
        chosen.extend(m for m, _ in group)
    return plans, chosen


def _forward_sites(found: PlacedMatch) -> set[int]:
    """Forward statements a match rewrites; a container match only edits ``__init__``."""
    if found.placement.plan == "container":
        return set()
    nodes = found.match.nodes
    return {id(n.site.line) for n in nodes} | {id(n.site.small) for n in nodes}


def _same_init_edits(plans: Sequence[EditPlan]) -> bool:
    """Plans that rewrite the same ``__init__`` node must produce the same code for it."""
    seen: dict[int, str] = {}
    empty = cst.Module([])
    for plan in plans:
        for key in plan.init_nodes:
            code = _code(empty, plan.replace[key]) if key in plan.replace else "<deleted>"
            if seen.setdefault(key, code) != code:
                return False
    return True


def _code(module: cst.Module, node: Union[cst.CSTNode, cst.FlattenSentinel[cst.BaseStatement]]) -> str:
    if isinstance(node, cst.FlattenSentinel):
        return "".join(module.code_for_node(n) for n in node.nodes)
    return module.code_for_node(node)


@dataclass
class RewriteOutcome:
    module: cst.Module
    applied: list[PlacedMatch]  # first-round matches (positions refer to the input module)
    rounds: int
    codes: tuple[str, ...] = ()  # every rule applied, in any round (sorted): a later round's rule has no positions


@collector_paused
def rewrite_module(
    module: cst.Module,
    rules: Sequence[Rule],
    structure: Optional[ModuleStructure] = None,
    matches: Optional[Sequence[PlacedMatch]] = None,
    path: Optional[str] = None,
) -> RewriteOutcome:
    """Apply the rules until nothing changes. Overlapping rewrites are done in successive rounds. `matches`:
    ``find_all(structure, rules)`` when the caller already has it (it is the first round's). `path`: the module's
    file, for the structures of later rounds (see :func:`~adopter_codemods.provider.build_module_structure`)."""
    first: list[PlacedMatch] = []
    codes: set[str] = set()
    rounds = 0
    original = module
    while rounds < MAX_ROUNDS:
        if structure is None:
            structure = build_module_structure(module, path)
        if matches is not None and rounds == 0:
            found = list(matches)
        else:
            with files.analysing(module):
                found = find_all(structure, rules)
        plans, chosen = select_compatible(found)
        if not plans:
            break
        if rounds == 0:
            first = chosen
        codes.update(m.match.rule.code for m in chosen)
        module = apply_plan(module, merge_plans(plans))
        structure = None
        rounds += 1
    if rounds:
        module = remove_imports_left_unused(original, module)
        _check_names(original, module, path)
    return RewriteOutcome(module, first, rounds, tuple(sorted(codes)))


def _check_names(original: cst.Module, rewritten: cst.Module, path: Optional[str]) -> None:
    """Raise a SourceError, so that the file is left as it was, if the rewrite makes a function read a name that
    nothing defines (undefined_names.py): an engine bug, never a rewrite to hand over."""
    new = new_undefined_names(original.code, rewritten.code)
    if new:
        function, name, line = new[0]
        raise files.SourceError(files.FileError(
            path or "<string>", line,
            f"the rewrite would make `{function}` read `{name}`, which nothing defines there, so the file is left "
            "unchanged (an engine bug: please report it with this file)",
        ))


@dataclass
class Analysis:
    """The rules matched on one parsed file, each judged on the unmodified module. `source`: the bytes the module
    was parsed from, when known (positions are then found faster); `path` names the file in findings and skips."""

    module: cst.Module
    rules: Sequence[Rule]
    path: str
    source: Optional[bytes]
    structure: ModuleStructure
    matches: list[PlacedMatch]
    refusals: Optional[list[Refusal]] = None  # collected only when asked for (`analyse(..., with_refusals=True)`)
    _rewritten: Optional[RewriteOutcome] = field(default=None, init=False, repr=False)

    def findings(self, matches: Optional[Sequence[PlacedMatch]] = None) -> list[Finding]:
        """Findings of the matches (or of `matches`, some of them, such as ``rewrite().applied``)."""
        return findings_for(self.module, self.matches if matches is None else matches, self.path, source=self.source)

    def refused(self) -> list[RefusedSite]:
        """The sites a rule matched structurally but refused, with the reason; [] unless collected."""
        return refusals_for(self.module, self.refusals or [], self.path, self.source)

    def skips(self) -> list[Skip]:
        """The units of the input the walk gave up on (later rewrite rounds re-walk the rewritten module)."""
        return skips_for(self.structure, self.path, self.source)

    def rewrite(self) -> RewriteOutcome:
        """Every rule applied until nothing changes (:func:`rewrite_module`); the first round is these matches."""
        if self._rewritten is None:
            self._rewritten = rewrite_module(self.module, self.rules, self.structure, self.matches, self.path or None)
        return self._rewritten


@collector_paused
def analyse(
    module: cst.Module,
    rules: Sequence[Rule],
    path: Optional[str] = None,
    *,
    source: Optional[bytes] = None,
    structure: Optional[ModuleStructure] = None,
    with_refusals: bool = False,
) -> Analysis:
    """Match `rules` on a parsed module. `structure`: the module's, when a LibCST metadata provider already built it
    (the codemods); `path`: the file's name, "" when unknown; where it is a file, bases imported from other files
    are resolved from it (:mod:`.class_bases`); `with_refusals`: also collect the refused sites
    (:meth:`Analysis.refused`)."""
    with files.analysing(module, source):  # the guards' whole-file `ast` parses the bytes instead of rendering
        if structure is None:
            structure = build_module_structure(module, path)
        refusals: Optional[list[Refusal]] = [] if with_refusals else None
        matches = find_all(structure, rules, refusals)
    return Analysis(module, rules, path or "", source, structure, matches, refusals)


@collector_paused
def analyse_source(
    source: Union[str, bytes], rules: Sequence[Rule], path: str = "<string>", *, with_refusals: bool = False
) -> Analysis:
    """Parse source (:func:`files.parse`: raises :class:`files.SourceError` for nesting that would crash LibCST's
    parser, ``libcst.ParserSyntaxError`` for invalid syntax) and match `rules` on it."""
    module = files.parse(source, path)
    data = source.encode("utf-8") if isinstance(source, str) else source
    return analyse(module, rules, path, source=data, with_refusals=with_refusals)


@collector_paused
def analyse_file(
    path: str, rules: Sequence[Rule], data: Optional[bytes] = None, *, with_refusals: bool = False
) -> Analysis:
    """Read (unless its bytes are given as `data`), decode and parse a file (:func:`files.parse_file`: every problem
    is a located :class:`files.SourceError`) and match `rules` on it."""
    if data is None:
        data = files.read_source(path)
    return analyse(files.parse_file(path, data), rules, path, source=data, with_refusals=with_refusals)

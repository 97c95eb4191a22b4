"""What matched (`matcher.Match`) is immutable and apart from where its rewrite goes (`matcher.Placement`): the
planners read a match and return a placement, so planning the same match again gives an equal placement, the one
`find_matches` returned with it (docs/ENGINE.md "Match and Placement")."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping, Optional, Union

import libcst as cst
import pytest

from adopter_codemods import hoist, matcher, sink
from adopter_codemods.dsl import Wildcard
from adopter_codemods.engine import find_all
from adopter_codemods.matcher import Match, PlacedMatch, Placement, Reason
from adopter_codemods.provider import build_module_structure
from adopter_codemods.rules import select_rules
from adopter_codemods.structure import DLNode
from conftest import fixture_cases, rule_code

# Placements built in `_variant_matches`/`_find_init_only` from the match alone, with no planner to call again.
_UNPLANNED = ("init", "container")


def _found(case: Path) -> list[PlacedMatch]:
    module = cst.parse_module(case.read_text(encoding="utf-8"))
    return find_all(build_module_structure(module), select_rules([rule_code(case)]))


def _aligned(match: Match) -> list[Optional[DLNode]]:
    """The node per source pattern `_variant_matches` planned with: None for an absent optional node (the match's
    rule, a variant, has no wildcard: its nodes are then the others, in order)."""
    assert match.rule.forward is not None
    assert not any(isinstance(p, Wildcard) for p in match.rule.forward.source)
    nodes = iter(match.nodes)
    return [None if i in match.skipped else next(nodes) for i in range(len(match.rule.forward.source))]


def _replan(match: Match, placement: Placement) -> Union[Placement, Reason, None]:
    """The placement the planner of `placement`'s kind gives `match` (the path checks it passed are not asked
    again)."""
    kind = placement.plan
    if kind == "hoist":
        return hoist.plan_hoist(match)
    if kind == "sink":
        assert placement.unsunk is not None
        return sink.plan_sink(match, placement.unsunk)
    planned = matcher._plan(match)
    if kind != "fallback":
        return planned
    if isinstance(planned, Placement) and planned.plan == "block":
        return matcher._plan_fallback(match, planned)
    return matcher._plan_absorbing(match, _aligned(match))


def _snapshot(match: Match) -> dict[str, object]:
    """The match's fields, its mappings as plain dicts."""
    fields = {f.name: getattr(match, f.name) for f in dataclasses.fields(match)}
    return {name: dict(value) if isinstance(value, Mapping) else value for name, value in fields.items()}


def test_planning_a_match_again_gives_an_equal_placement() -> None:
    kinds: set[str] = set()
    for case in fixture_cases():
        for found in _found(case):
            match, placement = found.match, found.placement
            kinds.add(placement.plan)
            if placement.plan in _UNPLANNED:
                continue
            before = _snapshot(match)
            first, second = _replan(match, placement), _replan(match, placement)
            assert first == placement, f"{case}: {placement.plan}"
            assert second == first
            assert first is not placement  # a new placement, not one kept on the match
            assert _snapshot(match) == before
    # every kind of placement occurs in the fixtures, so the comparison above covers each planner
    assert kinds == {"inline", "block", "branch", "fallback", "hoist", "sink", "init", "container"}


def test_matches_and_placements_cannot_be_changed() -> None:
    found = [f for case in fixture_cases() for f in _found(case)]
    assert found
    for f in found:
        with pytest.raises(dataclasses.FrozenInstanceError):
            f.match.certainty = "guarded"  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            f.placement.anchor = None  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            f.placement = f.placement  # type: ignore[misc]
        with pytest.raises(TypeError):
            f.match.env["x"] = f.match.env.get("x")  # type: ignore[index]
        with pytest.raises(TypeError):
            f.match.init_matches["x"] = None  # type: ignore[index]
        with pytest.raises(TypeError):
            f.placement.names[0] = "x"  # type: ignore[index]
        with pytest.raises(TypeError):
            f.placement.output_copies[0] = None  # type: ignore[index]
        assert isinstance(f.match.nodes, tuple) and isinstance(f.placement.deleted, tuple)


def test_mappings_are_copied_in() -> None:
    """A match or placement keeps what it was built with, whatever happens to the dicts passed in afterwards."""
    f = next(f for case in fixture_cases() for f in _found(case) if f.placement.names)
    env, names = dict(f.match.env), dict(f.placement.names)
    match = dataclasses.replace(f.match, env=env)
    placement = dataclasses.replace(f.placement, names=names)
    env.clear()
    names.clear()
    assert dict(match.env) == dict(f.match.env) and dict(placement.names) == dict(f.placement.names)
    assert placement == f.placement

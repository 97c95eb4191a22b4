"""While the engine analyses a module, its whole-file checks parse the bytes the module came from instead of
rendering the tree (files.source_of); anywhere else they get the module's code, the same text."""

from __future__ import annotations

from typing import Optional

import libcst as cst
import pytest

from adopter_codemods import engine, files
from adopter_codemods.structure import ModuleStructure

SOURCE = b"# -*- coding: latin-1 -*-\nname = '\xe9'\n"


def test_source_of_gives_the_bytes_only_while_known() -> None:
    module, other = cst.parse_module(SOURCE), cst.parse_module(SOURCE)
    assert files.source_of(module) == module.code
    with files.known_source(module, SOURCE):
        assert files.source_of(module) is SOURCE
        assert files.source_of(other) == other.code  # an equal module is not the one being analysed
        with files.known_source(other, None):  # unknown bytes: nothing recorded
            assert files.source_of(other) == other.code
    assert files.source_of(module) == module.code


def test_engine_analysis_makes_it_known(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []

    def find_all(structure: ModuleStructure, rules: object, refusals: Optional[list[object]] = None) -> list[object]:
        seen.append(files.source_of(structure.module))
        return []

    monkeypatch.setattr(engine, "find_all", find_all)
    engine.analyse_source(SOURCE, [], "m.py")
    assert seen == [SOURCE]

"""An analysis leaves no reference cycle holding the file's syntax tree.

``scan`` and ``rewrite`` pause the garbage collector for each file (adopter_codemods/gc_pause.py) and rely on
reference counting to free its tree when the file is done. A cycle through the analysis (a recursive closure
capturing a class structure, which holds the module) keeps the whole tree alive until the next collection, which
then traverses it: on the transformers corpus that was up to 53 000 objects per file (over 1000 in 71 of the 206
files) and about 1 s of collections (docs/PERFORMANCE.md, "Reference cycles"). Here every fixture and two real model files are
analysed, reported and rewritten with the collector off; afterwards, no definition of the file, no module and no
class structure may be among the objects only the collector could free.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import libcst as cst
import pytest

from adopter_codemods import files
from adopter_codemods.engine import analyse
from adopter_codemods.rules import builtin_rules
from adopter_codemods.structure import ClassStructure, ModuleStructure
from conftest import fixture_cases

_TREE_HOLDERS = (cst.Module, cst.ClassDef, cst.FunctionDef, ClassStructure, ModuleStructure)


def _real_files() -> list[Path]:
    transformers = pytest.importorskip("transformers")
    models = Path(transformers.__file__).parent / "models"
    return [models / "bert" / "modeling_bert.py", models / "t5" / "modeling_t5.py"]


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _analyse(path: Path) -> None:
    """Analyse `path`, report (findings, skips, refusals) and rewrite it, and drop it all."""
    data = path.read_bytes()
    module = files.parse_file(str(path), data)
    analysis = analyse(module, list(builtin_rules()), str(path), source=data, with_refusals=True)
    analysis.findings()
    analysis.skips()
    analysis.refused()
    analysis.rewrite()


@pytest.mark.usefixtures("collector_off")
def test_no_cycle_holds_the_tree() -> None:
    for case in [*fixture_cases(), *_real_files()]:
        _analyse(case)
    gc.set_debug(gc.DEBUG_SAVEALL)  # keep what the collection finds, to look at it
    gc.collect()
    # `type`, not isinstance: the garbage may hold weak proxies to objects already freed
    held = sorted({type(o).__name__ for o in gc.garbage if type(o) in _TREE_HOLDERS})
    assert not held, f"left to the garbage collector: {held}"

"""Classes and functions the engine did not analyse are reported with their reason: the core (`skips_for`), `scan`
(text on stderr, JSON `skipped`, SARIF notifications, the cache), `rewrite` and the LibCST codemod.

The number of paths no longer leaves anything out (tests/test_flow.py); what remains is a function nested too
deeply for the recursive walk. Nesting that deep also defeats the positions these reports need, so the walk is
made to give up on three chosen functions (as it does on a RecursionError) instead."""

from __future__ import annotations

import json
from pathlib import Path

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, transform_module

from adopter_codemods import AdoptAll
from adopter_codemods.cli import main
from adopter_codemods.engine import Skip, find_all, skips_for
from adopter_codemods import provider
from adopter_codemods.provider import build_module_structure
from adopter_codemods.rules import select_rules

GIVE_UP = {("M", "forward"), ("N", "busy"), ("", "top")}  # (class, function) the walk gives up on
FORWARD_IFS = "".join(f"        if x.shape[{i}] > 1:\n            x = self.drop(x)\n" for i in range(9))
BUSY_IFS = "".join(f"        if x > {i}:\n            x = torch.relu(x)\n" for i in range(7))
TOP_IFS = "".join(f"    if x > {i}:\n        x = torch.relu(x)\n" for i in range(7))
SOURCE = f"""\
import torch
import torch.nn.functional as F
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)
        self.ln = nn.LayerNorm(3)

    def forward(self, x, r):
{FORWARD_IFS}        return self.ln(x + r)


class N(nn.Module):
    def forward(self, x):
        return F.softmax(x, dim=-1)

    def busy(self, x):
{BUSY_IFS}        return F.softmax(x, dim=0)


def top(x):
{TOP_IFS}    return F.softmax(x, dim=0)
"""
LINES = SOURCE.splitlines()
CLASS_M = LINES.index("class M(nn.Module):") + 1
BUSY = LINES.index("    def busy(self, x):") + 1
TOP = LINES.index("def top(x):") + 1
EXPECTED = [
    Skip("m.py", "M", None, CLASS_M, "forward is nested too deeply to analyse"),
    Skip("m.py", "N", "busy", BUSY, "busy is nested too deeply to analyse"),
    Skip("m.py", "", "top", TOP, "top is nested too deeply to analyse"),
]


@pytest.fixture(autouse=True)
def walk_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    real = provider._ClassWalker.function_graph

    def function_graph(self: provider._ClassWalker, fn: cst.FunctionDef):  # type: ignore[no-untyped-def]
        if (self.info.name, fn.name.value) in GIVE_UP:
            raise RecursionError
        return real(self, fn)

    monkeypatch.setattr(provider._ClassWalker, "function_graph", function_graph)


def test_source_parses_as_intended() -> None:
    compile(SOURCE, "m.py", "exec")
    assert LINES[TOP] == "    if x > 0:"


@pytest.mark.parametrize("with_source", [True, False])
def test_core_lists_every_unit_it_gave_up_on(with_source: bool) -> None:
    module = cst.parse_module(SOURCE)
    structure = build_module_structure(module)
    findings = find_all(structure, select_rules(["all"]))
    assert [f.match.cls.name for f in findings] == ["N"]  # only N.forward's softmax: the rest was not analysed
    assert skips_for(structure, "m.py", SOURCE.encode() if with_source else None) == EXPECTED
    assert [s.unit for s in EXPECTED] == ["class M", "function N.busy", "function top"]


def test_units_no_rule_needed_are_not_walked() -> None:
    structure = build_module_structure(cst.parse_module(SOURCE))
    find_all(structure, select_rules(["ADP009"]))  # no Linear anywhere: no class is walked
    assert skips_for(structure, "m.py") == []


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(SOURCE, encoding="utf-8")
    return tmp_path / "m.py"


def _notes() -> list[str]:
    return [
        f"m.py:{CLASS_M}: note: class M not analysed: forward is nested too deeply to analyse",
        f"m.py:{BUSY}: note: function N.busy not analysed: busy is nested too deeply to analyse",
        f"m.py:{TOP}: note: function top not analysed: top is nested too deeply to analyse",
    ]


@pytest.mark.parametrize("cache", [["--no-cache"], [], []])  # the second cached run serves the same skips
def test_scan_text_notes_on_stderr(model: Path, capsys: pytest.CaptureFixture[str], cache: list[str]) -> None:
    assert main(["scan", "--rules", "all", *cache, "m.py"]) == 1
    out, err = capsys.readouterr()
    assert "not analysed" not in out
    assert err.splitlines()[:3] == _notes()
    assert err.splitlines()[3].endswith("; 3 classes or functions not analysed")


def test_scan_json_skipped_list(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["scan", "--rules", "all", "--no-cache", "--format", "json", "m.py"])
    report = json.loads(capsys.readouterr().out)
    assert report["version"] == 3
    assert report["skipped"] == [s.to_json() for s in EXPECTED]
    assert list(report["skipped"][0]) == ["path", "class", "function", "line", "reason"]


def test_scan_sarif_notifications(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["scan", "--rules", "all", "--format", "sarif", "m.py"])
    invocation = json.loads(capsys.readouterr().out)["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is True
    notes = invocation["toolExecutionNotifications"]
    assert [(n["level"], n["descriptor"]["id"]) for n in notes] == [("warning", "skipped")] * 3
    assert notes[0]["message"]["text"] == "class M not analysed: forward is nested too deeply to analyse"
    assert notes[0]["locations"][0]["physicalLocation"]["region"] == {"startLine": CLASS_M}


def test_rewrite_says_so(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rewrite", "--rules", "all", "--check", "m.py"]) == 1
    assert capsys.readouterr().err.splitlines()[1:4] == _notes()  # after "would rewrite m.py (ADP004)"


def test_codemod_warns() -> None:
    codemod = AdoptAll(CodemodContext(filename="m.py"))
    transform_module(codemod, SOURCE)
    assert codemod.context.warnings == [
        f"line {s.line}: {s.unit} not analysed: {s.reason}" for s in EXPECTED
    ]

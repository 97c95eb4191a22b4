"""The engine's parse skips LibCST's node validation (adopter_codemods/unvalidated_parse.py): the trees must be the
ones LibCST builds, the same inputs must be rejected, and validation must still guard every other node."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import libcst as cst
import pytest

from adopter_codemods import files, unvalidated_parse

ROOT = Path(__file__).resolve().parent.parent
# The rules' fixtures under 20 kB (the forms the rules meet) and the provider's modules: a few seconds of parsing.
SOURCES = [p for p in sorted((ROOT / "fixtures").rglob("*.py")) if p.stat().st_size < 20_000]
SOURCES += sorted((ROOT / "adopter_codemods" / "provider").glob("*.py"))


def test_real_sources_give_the_same_trees() -> None:
    for path in SOURCES:
        data = path.read_bytes()
        ours, theirs = unvalidated_parse.parse_module(data), cst.parse_module(data)
        assert ours.deep_equals(theirs), path
        assert ours.bytes == data, path


def _outcome(parse, source: str) -> str:  # type: ignore[no-untyped-def]
    try:
        return "ok" if parse(source).code == source else "changed"  # "changed": LibCST drops a backslash opening the module
    except cst.ParserSyntaxError:
        return "syntax error"


def test_mutated_lines_are_accepted_and_rejected_alike() -> None:
    """Real lines with tokens deleted or inserted (a fixed seed): where LibCST's validation would reject what its
    grammar accepted, the two parses would differ."""
    rng = random.Random(20261127)
    lines = [
        line.strip()
        for path in SOURCES
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    tokens = ["(", ")", ",", "=", "*", "**", ":", " if ", " else ", " for ", " in ", "lambda ", "yield ", ".", " not ",
              "[", "]", "{", "}", "@", "/", " ", "", "\\\n", "await ", ":=", "->", "'", "f'", "1", "_"]  # fmt: skip
    outcomes = set()
    for _ in range(3000):
        text = rng.choice(lines)
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(text))
            if rng.random() < 0.5:
                text = text[:at] + text[at + rng.randint(1, 3) :]
            else:
                text = text[:at] + rng.choice(tokens) + text[at:]
        source = ("def f(a, b=1, *c, d, **e):\n    " if rng.random() < 0.3 else "") + text + "\n"
        ours, theirs = _outcome(unvalidated_parse.parse_module, source), _outcome(cst.parse_module, source)
        assert ours == theirs, source
        outcomes.add(ours)
    assert {"ok", "syntax error"} <= outcomes  # both kinds were tried


def test_nodes_built_outside_the_parse_are_validated() -> None:
    unvalidated_parse.parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")
    with pytest.raises(cst.ParserSyntaxError):
        unvalidated_parse.parse_module("x = (\n")
    with pytest.raises(cst.CSTValidationError):  # a failed parse leaves validation on
        cst.Name("")


def test_another_thread_validates_while_this_one_parses() -> None:
    unvalidated_parse.parse_module("x = 1\n")  # installs the hook
    errors: list[BaseException] = []

    def build() -> None:
        try:
            cst.Name("")
        except cst.CSTValidationError as exc:
            errors.append(exc)

    unvalidated_parse._STATE.parsing = True  # as during a parse in this thread
    try:
        other = threading.Thread(target=build)
        other.start()
        other.join()
    finally:
        unvalidated_parse._STATE.parsing = False
    assert len(errors) == 1


def test_the_engine_parses_without_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[object] = []
    monkeypatch.setattr(unvalidated_parse, "parse_module", lambda source: called.append(source) or cst.parse_module(source))
    files.parse("x = 1\n", "<string>")
    assert called == ["x = 1\n"]

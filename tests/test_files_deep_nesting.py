"""Input nested so deeply that LibCST's native parser would crash the process is reported, not fatal.

LibCST overflows its stack on ~3000 nested brackets or ~10000 chained `and`s; the screen in ``files.py`` sends
suspicious files to CPython's parser and then to LibCST in a forked child first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adopter_codemods.api import scan_source
from adopter_codemods.cli import main
from adopter_codemods.files import SourceError, _suspicious_offset
from test_cli import ADP005_SOURCE

DEEP_BRACKETS = "x = 1\ny = " + "(" * 3000 + "1" + ")" * 3000 + "\n"  # CPython: too many nested parentheses
PLUS_CHAIN = "x = 1\ny = " + " + ".join(["1"] * 20000) + "\n"  # CPython: RecursionError
AND_CHAIN = "x = 1\n\ny = (\n" + " and\n".join(["a"] * 10000) + ")\n"  # CPython compiles it; LibCST crashes


def _flagged_line(source: str) -> int | None:
    offset = _suspicious_offset(source.encode())
    return None if offset is None else source.count("\n", 0, offset) + 1


def test_screen_flags_deep_and_long_input_only() -> None:
    assert _flagged_line(ADP005_SOURCE) is None
    assert _flagged_line(DEEP_BRACKETS) == 2
    assert _flagged_line(PLUS_CHAIN) == 2
    assert _flagged_line(AND_CHAIN) == 3
    continued = "x = 1\n" + "y = 1 + \\\n" * 600 + "1\n"  # one logical line over many physical ones
    assert _flagged_line(continued) in (1, 2)  # joined lines: reported at the line or the one before


def test_screen_ignores_stray_brackets_in_strings() -> None:
    docstring = 'class A:\n    """Shape `(batch, seq` and 1) 2) 3)' + "\n    words" * 1000 + '"""\n'
    # Single-quoted strings are not blanked: a stray opener is forgotten at the next `def`/`class` line.
    stray = "class B:\n    x = ':('\n" + "    y = 1\n" * 100 + "    def f(self):\n" + "        y = 1\n" * 300
    assert _flagged_line(docstring + stray + ADP005_SOURCE) is None


def test_scan_reports_each_crashing_file_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "brackets.py").write_text(DEEP_BRACKETS)
    (src / "plus_chain.py").write_text(PLUS_CHAIN)
    (src / "and_chain.py").write_text(AND_CHAIN)
    (src / "model.py").write_text(ADP005_SOURCE)
    long_but_fine = "TABLE = {\n" + "".join(f"    'k{i}': {i},\n" for i in range(400)) + "}\n" + ADP005_SOURCE
    (src / "table_model.py").write_text(long_but_fine)  # flagged by the screen, parsed by both: scanned
    status = main(["scan", "--rules", "all", "src", "--format", "json", "--no-cache", "--no-progress"])
    report = json.loads(capsys.readouterr().out)
    assert status == 2
    assert sorted(Path(f["path"]).name for f in report["findings"]) == ["model.py", "table_model.py"]
    errors = {Path(e["path"]).name: (e["line"], e["message"]) for e in report["errors"]}
    assert errors["brackets.py"] == (2, "syntax error: too many nested parentheses")
    assert errors["plus_chain.py"] == (2, "nested too deeply for Python's parser (it cannot be compiled)")
    assert errors["and_chain.py"] == (3, "nested too deeply for LibCST's parser (it crashed on a copy)")


def test_api_raises_instead_of_crashing() -> None:
    with pytest.raises(SourceError, match="LibCST's parser"):
        scan_source(AND_CHAIN, ["all"])

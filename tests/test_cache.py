"""The re-run cache of ``scan``: unchanged files are served from it, anything that could change the findings
misses it, and ``--no-cache`` leaves no trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adopter_codemods import cli, files
from adopter_codemods.cache import ScanCache
from adopter_codemods.rules import select_rules

MODEL = """\
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)
        self.ln = nn.LayerNorm(8)

    def forward(self, x, r):
        return self.ln(self.drop(x) + r)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADOPTER_CACHE_DIR", raising=False)
    (tmp_path / "model.py").write_text(MODEL)
    return tmp_path


def scan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    rules = () if "--rules" in args else ("--rules", "all")
    code = cli.main(["scan", *rules, "--format", "json", "--no-progress", *args])
    report = json.loads(capsys.readouterr().out)
    assert code == (1 if report["findings"] else 0)
    return report


def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every file the scan parses."""
    seen: list[str] = []
    real = files.parse_file

    def parse(path: str, data: bytes):  # type: ignore[no-untyped-def]
        seen.append(path)
        return real(path, data)

    monkeypatch.setattr(files, "parse_file", parse)
    return seen


def test_unchanged_file_is_not_parsed_again(project: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    first = scan(capsys, "model.py")
    assert (project / ".adopter_cache" / ".gitignore").read_text().endswith("*\n")
    seen = parses(monkeypatch)
    assert scan(capsys, "model.py") == first
    assert seen == []


def test_copied_file_hits_and_reports_its_own_path(project: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scan(capsys, "model.py")
    (project / "copy.py").write_text(MODEL)
    seen = parses(monkeypatch)
    report = scan(capsys, "copy.py")
    assert seen == [] and [f["path"] for f in report["findings"]] == ["copy.py"]


def test_edited_file_misses(project: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scan(capsys, "model.py")
    (project / "model.py").write_text(MODEL.replace("self.drop(x) + r", "x + r"))
    seen = parses(monkeypatch)
    assert scan(capsys, "model.py")["findings"] == []
    assert seen == ["model.py"]


def test_other_rules_miss(project: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scan(capsys, "model.py", "--rules", "ADP005")
    seen = parses(monkeypatch)
    assert scan(capsys, "model.py", "--rules", "ADP004")["findings"] == []
    rule = project / "mine.adopter"
    rule.write_text("rule Mine\ncode ADP105\nforward:\n    $a + $b -> $c => pkg.add($a, $b) -> $c\n")
    assert [f["code"] for f in scan(capsys, "model.py", "--rules", "ADP005", "--rule-file", str(rule))["findings"]]
    rule.write_text(rule.read_text().replace("pkg.add", "pkg.plus"))  # an edited user rule
    scan(capsys, "model.py", "--rules", "ADP005", "--rule-file", str(rule))
    assert seen == ["model.py"] * 3


def test_no_cache_neither_reads_nor_writes(project: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scan(capsys, "model.py", "--no-cache")
    assert not (project / ".adopter_cache").exists()
    scan(capsys, "model.py")
    seen = parses(monkeypatch)
    scan(capsys, "model.py", "--no-cache")
    assert seen == ["model.py"]


def test_cache_dir_from_the_environment(project: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ADOPTER_CACHE_DIR", str(project / "elsewhere"))
    scan(capsys, "model.py")
    assert (project / "elsewhere").is_dir() and not (project / ".adopter_cache").exists()


def test_sarif_is_not_served_from_the_cache(project: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scan(capsys, "model.py")
    seen = parses(monkeypatch)
    cli.main(["scan", "--rules", "all", "--format", "sarif", "--no-progress", "model.py"])
    capsys.readouterr()
    assert seen == ["model.py"]  # SARIF carries the fixes, which the cache does not keep


def test_corrupt_or_unwritable_cache_is_ignored(tmp_path: Path) -> None:
    rules = select_rules(["ADP005"])
    cache = ScanCache(tmp_path / "c", rules)
    data = MODEL.encode()
    assert cache.get(data, "m.py") is None
    cache.put(data, [])
    assert cache.get(data, "m.py") == ([], [])
    (entry,) = (tmp_path / "c").glob("*/*.json")
    entry.write_text("{not json")
    assert cache.get(data, "m.py") is None
    blocked = ScanCache(tmp_path / "file", rules)
    (tmp_path / "file").write_text("")  # the cache directory cannot be created
    blocked.put(data, [])
    assert blocked.get(data, "m.py") is None


def test_hits_are_served_without_workers(project: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Enough files for worker processes by default: on a re-run the hits are served by the command's own process,
    only the changed file is analysed, and the report is the same as without the cache."""
    for i in range(2 * cli.FILES_PER_WORKER):
        (project / f"m{i:02}.py").write_text(MODEL)
    left: list[int] = []  # per run, the files left to analyse once the cache served its hits
    monkeypatch.setattr(cli, "_job_count", lambda jobs, files: left.append(files) or 1)  # no pool in this test
    first = scan(capsys)
    (project / "m07.py").write_text(MODEL + "\n# edited\n")
    assert scan(capsys) == first
    assert scan(capsys, "--no-cache") == first
    assert left == [2 * cli.FILES_PER_WORKER + 1, 1, 2 * cli.FILES_PER_WORKER + 1]

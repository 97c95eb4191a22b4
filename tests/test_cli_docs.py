"""docs/FRONTENDS.md stays true: its examples are executed, in order, in an empty directory.

``console`` blocks: ``$ `` lines are commands run with bash (a trailing ``# exit N`` is the expected status, 0
otherwise); the lines after a command are its expected output (stdout and stderr together), where a line ``...``
matches any number of lines and ``...`` inside a line any text. A block whose info string has ``title="FILE"`` is
written to FILE before the commands that follow it.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import yaml

from conftest import ROOT

DOC = ROOT / "docs" / "FRONTENDS.md"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass
class WriteFile:
    path: str
    content: str


@dataclass
class Command:
    line: str
    status: int
    expected: list[str] = field(default_factory=list)


Step = Union[WriteFile, Command]


def blocks(text: str) -> list[tuple[str, Optional[str], str]]:
    """``(language, title, body)`` of every fenced block."""
    out = []
    for m in FENCE.finditer(text):
        title = re.search(r'title="([^"]+)"', m.group(2))
        out.append((m.group(1), title.group(1) if title else None, m.group(3)))
    return out


def steps(text: str) -> list[Step]:
    out: list[Step] = []
    for lang, title, body in blocks(text):
        if title:
            out.append(WriteFile(title, body))
        elif lang == "console":
            for line in body.splitlines():
                if line.startswith("$ "):
                    status = re.search(r"#\s*exit\s+(\d+)\s*$", line)
                    out.append(Command(line[2:], int(status.group(1)) if status else 0))
                else:
                    command = out[-1]
                    assert isinstance(command, Command), f"output line before any command: {line!r}"
                    command.expected.append(line)
    return out


def _line_pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.rstrip().split("...")))


def output_matches(expected: list[str], actual: list[str]) -> bool:
    patterns = [None if line.strip() == "..." else _line_pattern(line) for line in expected]

    @functools.lru_cache(maxsize=None)
    def match(i: int, j: int) -> bool:
        if i == len(patterns):
            return j == len(actual)
        pattern = patterns[i]
        if pattern is None:  # any number of lines
            return any(match(i + 1, k) for k in range(j, len(actual) + 1))
        return j < len(actual) and pattern.fullmatch(actual[j].rstrip()) is not None and match(i + 1, j + 1)

    return match(0, 0)


def test_output_matching_semantics() -> None:
    assert output_matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert output_matches(["a", "...", "d"], ["a", "d"])
    assert output_matches(["x (...)"], ["x (ADP004, ADP005)"])
    assert not output_matches(["a", "d"], ["a", "b", "d"])
    assert not output_matches(["a (b)"], ["a (bc)"])


def test_doc_has_examples_of_every_front_end() -> None:
    commands = " ".join(s.line for s in steps(DOC.read_text(encoding="utf-8")) if isinstance(s, Command))
    for needle in (
        "demo",
        " scan ",
        "--format json",
        "--format sarif",
        " rewrite ",
        " list",
        " explain ",
        "fixit lint",
        "fixit fix",
        "pre-commit run",
    ):
        assert needle in commands, needle


def test_documented_examples_run(tmp_path: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    for step in steps(DOC.read_text(encoding="utf-8")):
        if isinstance(step, WriteFile):
            (work / step.path).write_text(step.content, encoding="utf-8")
            continue
        proc = subprocess.run(
            ["bash", "-c", step.line],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        report = f"$ {step.line}\n--- exit {proc.returncode}, output:\n{proc.stdout}"
        assert proc.returncode == step.status, report
        if step.expected:
            expected = "\n".join(step.expected)
            assert output_matches(step.expected, proc.stdout.splitlines()), f"{report}--- expected:\n{expected}"


def test_documented_hook_configs_match_the_manifest() -> None:
    manifest = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}
    configs = [
        yaml.safe_load(body)
        for lang, _title, body in blocks(DOC.read_text(encoding="utf-8"))
        if lang == "yaml" and body.lstrip().startswith("repos:")
    ]
    assert len(configs) == 2  # the published repository and the local variant
    for config in configs:
        for repo in config["repos"]:
            for hook in repo["hooks"]:
                assert hook["id"] in manifest
                if repo["repo"] == "local":  # the same command line as the published hook
                    for key in ("entry", "types"):
                        assert hook[key] == manifest[hook["id"]][key]
                    assert hook.get("require_serial", False) == manifest[hook["id"]].get("require_serial", False)

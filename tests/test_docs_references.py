"""The documentation is self-contained: every design citation (``docs/DESIGN.md §N``) names a section that exists,
and every relative link of the Markdown files points at a file of the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

DESIGN = ROOT / "docs" / "DESIGN.md"


def _tracked(*patterns: str) -> list[Path]:
    done = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / line for line in done.stdout.splitlines() if (ROOT / line).is_file()]


def test_design_citations_name_existing_sections() -> None:
    sections = set(re.findall(r"^## (\d+)\. ", DESIGN.read_text(encoding="utf-8"), flags=re.M))
    assert sections >= {"1", "4", "5", "6", "7"}
    cited = 0
    for path in _tracked("*.py", "*.md", "*.toml", "*.yaml", "Makefile"):
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in re.finditer(r"(\S*)DESIGN\.md\)?\s*§(\d+)", text):
            cited += 1
            where = f"{path.relative_to(ROOT)}: {match.group(0)}"
            assert match.group(2) in sections, where
            # Outside docs/ a citation spells the path out; inside, a relative link is enough.
            assert path.parent == DESIGN.parent or "docs/DESIGN.md" in match.group(1) + "DESIGN.md", where
    assert cited >= 5


def test_markdown_links_resolve() -> None:
    for path in _tracked("*.md"):
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to missing {target}"

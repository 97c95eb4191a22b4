"""`adopter-codemods init` and the LibCST / Fixit routes on a project with a virtual environment inside.

`python -m libcst.tool codemod` and `fixit` walk every directory they are given; without a configuration they
rewrite the installed packages in `.venv` too. `init` writes the shipped `.libcst.codemod.yaml`, whose blacklist
skips what `scan` skips; Fixit 2.2.1 has no exclude option but skips what the project root's `.gitignore` lists.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from adopter_codemods.files import DEFAULT_EXCLUDES
from adopter_codemods.init_config import CONFIG_NAME, config_text
from conftest import ROOT

# One ADP005 site: Dropout -> residual add -> LayerNorm.
MODEL = """\
from torch import nn


class SelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states
"""
VENV_FILE = Path(".venv", "lib", "python3.11", "site-packages", "pkg", "model.py")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _project(tmp_path: Path) -> Path:
    """A project with the same model in its sources and in a package installed in its .venv."""
    for path in (Path("src", "model.py"), VENV_FILE):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(MODEL, encoding="utf-8")
    return tmp_path


def _rewritten(path: Path) -> bool:
    return "adopter_kernels.FusedDropoutAddLayerNorm" in path.read_text(encoding="utf-8")


def test_init_writes_the_shipped_config_and_keeps_an_existing_one(tmp_path: Path) -> None:
    done = _run("-m", "adopter_codemods", "init", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = tmp_path / CONFIG_NAME
    assert config.read_text(encoding="utf-8") == config_text()
    config.write_text("modules: ['mine']\n", encoding="utf-8")
    refused = _run("-m", "adopter_codemods", "init", cwd=tmp_path)
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert config.read_text(encoding="utf-8") == "modules: ['mine']\n"
    assert _run("-m", "adopter_codemods", "init", "--force", cwd=tmp_path).returncode == 0
    assert config.read_text(encoding="utf-8") == config_text()


def test_repository_config_is_the_shipped_one() -> None:
    assert (ROOT / CONFIG_NAME).read_text(encoding="utf-8") == config_text()


@pytest.mark.parametrize("name", DEFAULT_EXCLUDES)
def test_blacklist_skips_what_scan_skips_and_nothing_else(name: str) -> None:
    patterns = yaml.safe_load(config_text())["blacklist_patterns"]

    def skipped(path: str) -> bool:
        return any(re.fullmatch(pattern, path) for pattern in patterns)

    for path in (f"{name}/x.py", f"./{name}/x.py", f"src/{name}/lib/x.py", f"C:\\p\\{name}\\x.py"):
        assert skipped(path), path
    for path in (f"src/{name}.py", f"src/{name}s/x.py", f"src/my{name}/x.py", f"{name}x/y.py"):
        assert not skipped(path), path


def test_libcst_codemod_after_init_leaves_the_venv_alone(tmp_path: Path) -> None:
    project = _project(tmp_path)
    assert _run("-m", "adopter_codemods", "init", cwd=project).returncode == 0
    done = _run("-m", "libcst.tool", "codemod", "adopter_codemods.AdoptAll", ".", cwd=project)
    assert done.returncode == 0, done.stderr
    assert _rewritten(project / "src" / "model.py")
    assert (project / VENV_FILE).read_text(encoding="utf-8") == MODEL


FIXIT_CONFIG = """\
[tool.fixit]
root = true
enable = ["adopter_codemods.lint"]
disable = ["fixit.rules"]
"""


@pytest.mark.parametrize("ignored", [True, False], ids=["gitignore", "no-gitignore"])
def test_fixit_skips_what_the_root_gitignore_lists(tmp_path: Path, ignored: bool) -> None:
    """Fixit 2.2.1 walks everything but the root .gitignore's entries: without one it rewrites the venv too."""
    project = _project(tmp_path)
    (project / "pyproject.toml").write_text(FIXIT_CONFIG, encoding="utf-8")
    if ignored:
        (project / ".gitignore").write_text(".venv/\n", encoding="utf-8")
    done = _run("-m", "fixit", "fix", "--automatic", ".", cwd=project)
    assert done.returncode == 0, done.stderr
    assert _rewritten(project / "src" / "model.py")
    assert _rewritten(project / VENV_FILE) is not ignored

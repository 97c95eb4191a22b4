"""pre-commit hooks (.pre-commit-hooks.yaml).

The hooks run through ``pre-commit run`` as ``repo: local`` hooks with ``language: system`` and the manifest's own
entries (that works offline). ``pre-commit try-repo`` on a clone installs the repository with pip (libcst and fixit
from PyPI): that test runs only with ``ADOPTER_TEST_TRY_REPO=1``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pre_commit.clientlib import load_manifest

from adopter_codemods.api import rewrite_source
from conftest import ROOT

MANIFEST_PATH = ROOT / ".pre-commit-hooks.yaml"
HOOKS = {h["id"]: h for h in yaml.safe_load(MANIFEST_PATH.read_text(encoding="utf-8"))}
MODEL = (ROOT / "adopter_codemods" / "examples" / "bert_like.py").read_text(encoding="utf-8")
CLEAN = "import torch\n\n\ndef f(x):\n    return x + 1\n"


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    return env


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    """A git repository using the manifest's hooks as local hooks, with ``files`` staged."""
    repo = tmp_path / "repo"
    repo.mkdir()
    hooks = [{k: v for k, v in {**hook, "language": "system"}.items() if k != "description"} for hook in HOOKS.values()]
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump({"repos": [{"repo": "local", "hooks": hooks}]}))
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    return repo


def _pre_commit(repo: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args],
        cwd=repo,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_manifest() -> None:
    load_manifest(str(MANIFEST_PATH))  # pre-commit's own schema
    assert set(HOOKS) == {"adopter-scan", "adopter-fix"}
    for hook in HOOKS.values():
        assert hook["language"] == "python" and hook["types"] == ["python"]
        assert hook["entry"].startswith("python -m adopter_codemods ")
    # pre-commit runs batches of files in parallel itself: the scan hook's process spawns no workers
    assert HOOKS["adopter-scan"]["entry"].split()[3:] == ["scan", "--format", "text", "--no-default-path", "-j", "1"]
    assert HOOKS["adopter-fix"]["entry"].split()[3:] == ["rewrite"]
    assert HOOKS["adopter-fix"]["require_serial"] is True


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_entry_without_files_succeeds(hook: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, *shlex.split(HOOKS[hook]["entry"])[1:]],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""


def test_hooks_with_no_python_files(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"README.txt": "nothing to see\n"})
    proc = _pre_commit(repo, tmp_path, "run", "--all-files")
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.count("(no files to check)Skipped") == 2


def test_hooks_on_many_files_with_a_syntax_error(tmp_path: Path) -> None:
    files = {f"pkg/clean_{i:02d}.py": CLEAN for i in range(60)}
    files |= {"pkg/model.py": MODEL, "pkg/broken.py": "x = 1\ndef f(:\n"}
    repo = _repo(tmp_path, files)
    proc = _pre_commit(repo, tmp_path, "run", "--all-files")
    assert proc.returncode == 1, proc.stdout
    scan_part, fix_part = proc.stdout.split("adopter fix")
    assert "- hook id: adopter-scan" in scan_part and "- exit code: 2" in scan_part
    assert "pkg/model.py:" in scan_part and "pkg/broken.py:2: error: syntax error" in scan_part
    assert "files were modified by this hook" in fix_part and "rewrote pkg/model.py" in fix_part
    assert "pkg/broken.py:2: error: syntax error" in fix_part
    # the other files were processed: the model is rewritten, nothing else changed
    assert (repo / "pkg" / "model.py").read_text(encoding="utf-8") == rewrite_source(MODEL).code
    assert (repo / "pkg" / "broken.py").read_text(encoding="utf-8") == files["pkg/broken.py"]
    assert all((repo / name).read_text(encoding="utf-8") == CLEAN for name in files if "clean_" in name)
    # once the rewrite is staged and the broken file is gone, both hooks pass
    (repo / "pkg" / "broken.py").unlink()
    _git(repo, "add", "-A")
    proc = _pre_commit(repo, tmp_path, "run", "--all-files")
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.count("Passed") == 2


@pytest.mark.skipif(
    os.environ.get("ADOPTER_TEST_TRY_REPO") != "1",
    reason="pip-installs the repository and its dependencies from PyPI; set ADOPTER_TEST_TRY_REPO=1",
)
def test_try_repo_installs_the_published_hooks(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    repo = _repo(tmp_path, {"model.py": MODEL, "broken.py": "x = (\n", "clean.py": CLEAN})
    env = _env(tmp_path)
    del env["PYTHONPATH"]  # the hook must run from its own environment
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(clone), "adopter-scan", "--all-files"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "model.py:" in proc.stdout and "broken.py:1: error: syntax error" in proc.stdout

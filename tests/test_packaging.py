"""The two distributions built from this repository: `adopter-codemods` (the codemods, scan, Fixit rules; no torch)
and `adopter-kernels` (the runtime kernels only, torch; built from kernels/pyproject.toml).

The wheels are built offline with the installed hatchling (`pip wheel --no-deps --no-build-isolation`), and their
file lists and requirements checked: a deployment of a rewritten model installs adopter-kernels alone.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from conftest import ROOT

pytest.importorskip("hatchling", reason="building the wheels offline needs hatchling (the test extra)")


def _build(project: Path, out: Path) -> zipfile.ZipFile:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(project)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


@pytest.fixture(scope="module")
def codemods_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return _build(ROOT, tmp_path_factory.mktemp("codemods"))


@pytest.fixture(scope="module")
def kernels_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return _build(ROOT / "kernels", tmp_path_factory.mktemp("kernels"))


def _top_level(wheel: zipfile.ZipFile) -> set[str]:
    return {name.split("/", 1)[0] for name in wheel.namelist() if not name.split("/", 1)[0].endswith(".dist-info")}


def _requirements(wheel: zipfile.ZipFile) -> list[str]:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return Parser().parsestr(wheel.read(name).decode()).get_all("Requires-Dist") or []


def test_codemods_wheel_holds_only_adopter_codemods(codemods_wheel: zipfile.ZipFile) -> None:
    assert _top_level(codemods_wheel) == {"adopter_codemods"}  # no adopter_kernels, no top-level gpu_bench
    names = set(codemods_wheel.namelist())
    shipped = {
        "adopter_codemods/data/libcst.codemod.yaml",  # what `init` writes
        "adopter_codemods/examples/bert_like.py",  # what `demo` shows
        *(f"adopter_codemods/rules/{p.name}" for p in (ROOT / "rules").glob("*.adopter")),
    }
    shipped |= {f"adopter_codemods/rules/{p.name}" for p in (ROOT / "rules").glob("*.md")}  # the rules' documentation
    assert shipped <= names, shipped - names
    requirements = _requirements(codemods_wheel)
    assert not [r for r in requirements if "extra ==" not in r and r.startswith("torch")]  # the codemods need no torch
    assert "adopter-kernels>=0.1; extra == 'kernels'" in requirements
    assert "adopter-kernels[triton]>=0.1; extra == 'triton'" in requirements


def test_kernels_wheel_holds_only_adopter_kernels(kernels_wheel: zipfile.ZipFile) -> None:
    assert _top_level(kernels_wheel) == {"adopter_kernels"}
    package = ROOT / "adopter_kernels"
    sources = {f"adopter_kernels/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")}
    assert {n for n in kernels_wheel.namelist() if not n.split("/", 1)[0].endswith(".dist-info")} == sources
    assert _requirements(kernels_wheel) == ["torch>=2.1", "triton>=2.1; extra == 'triton'"]
    assert "adopter_kernels/equivalence.py" in kernels_wheel.namelist()  # the harness needs torch: it lives here


# Hide torch as an environment without it would: every import of torch or a submodule fails.
NO_TORCH = textwrap.dedent(
    """
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTorch())
    try:
        import adopter_kernels
    except ImportError as exc:
        print(exc)
    else:
        raise SystemExit("adopter_kernels imported without torch")
    """
)


def test_import_without_torch_says_what_to_install() -> None:
    done = subprocess.run([sys.executable, "-c", NO_TORCH], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "needs PyTorch" in done.stdout and "pip install torch" in done.stdout
    assert "pip install adopter-kernels" in done.stdout


# Every module of the codemods distribution imports without torch (the equivalence harness, which needs torch,
# lives in adopter_kernels).
EVERY_MODULE_WITHOUT_TORCH = NO_TORCH.split("try:", 1)[0] + textwrap.dedent(
    """
    import importlib, pkgutil, sys
    import adopter_codemods

    names = [
        m.name
        for m in pkgutil.walk_packages(adopter_codemods.__path__, "adopter_codemods.")
        if m.name != "adopter_codemods.__main__"  # runs the command line
    ]
    for name in names:
        # each module imported first, as a user's `from adopter_codemods.rules import builtin_rules` is: no import
        # cycle may depend on the order
        for loaded in [m for m in sys.modules if m == "adopter_codemods" or m.startswith("adopter_codemods.")]:
            del sys.modules[loaded]
        importlib.import_module(name)
    print(len(names))
    """
)


def test_every_codemods_module_imports_first_and_without_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", EVERY_MODULE_WITHOUT_TORCH], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert int(done.stdout) > 20

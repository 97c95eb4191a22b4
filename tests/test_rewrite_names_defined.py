"""A rewrite never makes a function read a name nobody defines (adopter_codemods/undefined_names.py).

The fused call's arguments are written where it goes. A value computed inside a helper method has no name there:
written as it reads in the helper (timm's ``relative_position_bias``, ``x.reshape(B, h * w, C * r * r)``), it is a
NameError at run time, or another variable of the same name. The matcher refuses such matches; the engine's last
check refuses to hand over a rewrite that reads a new undefined name anyway (the file is left as it was). Every
torchvision and timm file (installed by `make model-zoo`) is rewritten with every rule without tripping it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from adopter_codemods.api import rewrite_source
from adopter_codemods.cli import main
from adopter_codemods.files import SourceError
from adopter_codemods.flow import checks
from adopter_codemods.undefined_names import new_undefined_names, undefined_names
from model_zoo import VISION_DIR, require

HELPER_LOCAL = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self, dim=16):
            super().__init__()
            self.dropout = nn.Dropout(0.1)
            self.norm = nn.LayerNorm(dim)

        def residual(self, x):
            kept = x * 0.5
            return kept

        def forward(self, x, h):
            h = self.dropout(h)
            h = self.norm(h + self.residual(x))
            return h
    """
)


def test_undefined_names_of_functions() -> None:
    code = "import torch\n\nclass M:\n    def f(self, x):\n        return x + y + torch.ones(1) + len(x)\n\n    def g(self):\n        def inner():\n            return z\n        return inner\n"
    reads, lines = undefined_names(code)  # type: ignore[misc]
    assert reads == {("M.f", "y"): 4, ("M.g.inner", "z"): 8}
    assert lines == {"M.f": 4, "M.g": 7, "M.g.inner": 8}
    assert undefined_names("from torch import *\n") is None  # what it defines is unknown
    assert undefined_names("def f(:\n") is None
    rewritten = code.replace("x + y", "x + y + kept")
    assert new_undefined_names(code, rewritten) == [("M.f", "kept", 4)]
    assert new_undefined_names(code, code) == []


def test_a_rewrite_reading_a_helper_local_is_refused_by_the_matcher() -> None:
    assert rewrite_source(HELPER_LOCAL, ["ADP005"]).code == HELPER_LOCAL


def test_the_engine_does_not_hand_over_a_rewrite_reading_an_undefined_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the matcher's check switched off, the rewrite names the helper's local `kept` in forward: the engine
    raises, naming the function, and the CLI leaves the file as it was."""
    monkeypatch.setattr(checks, "helper_refusal", lambda match, placement: None)
    with pytest.raises(SourceError) as raised:
        rewrite_source(HELPER_LOCAL, ["ADP005"], path="block.py")
    assert raised.value.error.line == 15
    assert "`Block.forward` read `kept`, which nothing defines there" in raised.value.error.message
    path = tmp_path / "block.py"
    path.write_text(HELPER_LOCAL, encoding="utf-8")
    assert main(["rewrite", "--rules", "ADP005", "--no-progress", str(path)]) == 2
    assert path.read_text(encoding="utf-8") == HELPER_LOCAL
    assert f"{path}:15: error: the rewrite would make `Block.forward` read `kept`" in capsys.readouterr().err


def test_rewritten_vision_sources_define_every_name_they_read() -> None:
    require(VISION_DIR)
    rewritten = 0
    for path in sorted(Path(VISION_DIR).glob("*/**/*.py")):
        source = path.read_text(encoding="utf-8")
        if "Module" in source and rewrite_source(source, ["all"], path=str(path)).code != source:
            rewritten += 1  # rewrite_source raises SourceError where a new name is undefined
    assert rewritten >= 90  # torchvision and timm: about a hundred files change

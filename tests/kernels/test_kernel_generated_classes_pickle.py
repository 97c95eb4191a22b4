"""Whole rewritten models pickle as their originals do (``torch.save(model)``, ``copy.deepcopy``).

ADP011's fused RMSNorm class and the attention rules' SDPA subclasses are made at run time from the model's own
class, so pickle cannot find them by name; their instances reduce to the factory that makes them
(``adopter_kernels/_pickling.py``). A model saved whole loads in another process where the model's module imports.
The model is the bundled example rewritten with every rule: it holds all of these classes."""

from __future__ import annotations

import copy
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from adopter_codemods.api import rewrite_source
from adopter_codemods.examples import bert_like

GENERATED = ["FusedRMSNorm", "SDPABartAttention", "SDPABertSelfAttention", "SDPAGPT2Attention", "SDPAT5Attention"]


def _generated(model: torch.nn.Module) -> list[str]:
    return sorted({type(m).__name__ for m in model.modules()} & set(GENERATED))


@pytest.fixture
def rewritten_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    source = Path(bert_like.__file__).read_text(encoding="utf-8")
    (tmp_path / "pickled_example.py").write_text(rewrite_source(source, ["all"]).code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pickled_example", raising=False)
    import pickled_example

    return pickled_example


def test_a_rewritten_model_saved_whole_loads_with_its_classes(rewritten_module, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, args = rewritten_module.make_example()
    model.eval()
    assert _generated(model) == GENERATED
    expected = model(*args)

    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert [type(m) for m in loaded.modules()] == [type(m) for m in model.modules()]
    torch.testing.assert_close(loaded(*args), expected, rtol=0, atol=0)
    torch.testing.assert_close(copy.deepcopy(model)(*args), expected, rtol=0, atol=0)

    # another process, where the classes are made again while the pickle loads
    saved = tmp_path / "example.pt"
    torch.save({"model": model, "args": args, "expected": expected}, saved)
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        f"data = torch.load({str(saved)!r}, weights_only=False)\n"
        "model = data['model']\n"
        f"assert {GENERATED!r} == sorted({{type(m).__name__ for m in model.modules()}} & set({GENERATED!r}))\n"
        "torch.testing.assert_close(model(*data['args']), data['expected'], rtol=0, atol=0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

"""Whole rewritten models pickle as their originals do (``torch.save(model)``, ``copy.deepcopy``).

ADP011's fused RMSNorm class and the attention rules' SDPA subclasses are made at run time from the model's own
class, so pickle cannot find them by name; their instances reduce to the factory that makes them
(``adopter_kernels/_pickling.py``). A model saved whole loads in another process where the model's module imports."""

from __future__ import annotations

import copy
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from adopter_codemods.api import rewrite_source

ORIGINAL = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from transformers.models.bert.modeling_bert import BertConfig, BertSelfAttention


    class RMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = RMSNorm(8)
            config = BertConfig(hidden_size=8, num_attention_heads=2, attention_probs_dropout_prob=0.0)
            self.attn = BertSelfAttention(config)

        def forward(self, x):
            return self.attn(self.norm(x))[0]
    """
)


@pytest.fixture
def rewritten_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    result = rewrite_source(ORIGINAL, ["ADP001", "ADP011"])
    assert sorted({f.code for f in result.findings}) == ["ADP001", "ADP011"]
    (tmp_path / "pickled_block.py").write_text(result.code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pickled_block", raising=False)
    import pickled_block

    return pickled_block


def test_a_rewritten_model_saved_whole_loads_with_its_classes(rewritten_module, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = rewritten_module.Block().eval()
    kinds = {name: type(m).__name__ for name, m in model.named_children()}
    assert kinds == {"norm": "FusedRMSNorm", "attn": "SDPABertSelfAttention"}
    x = torch.randn(2, 5, 8)
    expected = model(x)

    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert {n: type(m) for n, m in loaded.named_children()} == {n: type(m) for n, m in model.named_children()}
    torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(copy.deepcopy(model)(x), expected, rtol=0, atol=0)

    # another process, where the classes are made again while the pickle loads
    saved = tmp_path / "block.pt"
    torch.save({"model": model, "x": x, "expected": expected}, saved)
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        f"data = torch.load({str(saved)!r}, weights_only=False)\n"
        "model = data['model']\n"
        "assert [type(m).__name__ for m in model.children()] == ['FusedRMSNorm', 'SDPABertSelfAttention']\n"
        "torch.testing.assert_close(model(data['x']), data['expected'], rtol=0, atol=0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

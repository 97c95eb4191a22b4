"""Real timm attention rewritten by ADP010 and run against the original, in float64, in a fresh process.

* LeViT and EfficientFormer add attention biases that a helper method returns from a per-device cache
  (`get_attention_biases(x.device)`). The walk cannot follow that helper's result, so the fused call passes the call
  itself, evaluated where the fused call goes (flow/checks.py, `_moves_only_past_the_match`). The vision acceptance
  harness runs 64x64 inputs, which these fixed-resolution models do not take: this test builds them at 224x224 (the
  rewritten module registers timm's model names again).
* SwinV2 multiplies its cosine scores by a per-head `logit_scale` tensor, which the fast path takes on the query,
  and computes its relative position bias with an MLP between the score lines, which stays where it is while the
  score lines are copied into both arms of `if mask is not None:` (sink.py, `_commutes_with_computation`); a small
  configuration at 64x64.
* `timm.layers.Attention2d` scales by `q.size(-1) ** -0.5` and adds an optional mask under `if attn_mask is not
  None:`. The fused call goes after that `if`, so the scale is evaluated there: a metadata call, as pure as
  `q.shape[-1]` (provider/syntax.py, `is_metadata_call`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from adopter_codemods.api import rewrite_source
from model_zoo import ROOT, VISION_DIR, require

# model name -> timm module defining it, the ADP010 sites rewritten there, a text each site's call holds, the
# builder's keyword arguments and the image size
MODELS: dict[str, tuple[str, int, str, dict[str, object], int]] = {
    # efficientformer.py holds the same attention once
    "levit_128s": ("levit", 2, "mask=self.get_attention_biases(x.device)", {}, 224),
    # SwinV2: its per-head `logit_scale` tensor scales the query on the fast path; the unshifted blocks are fused,
    # the shifted ones run as written (the score lines copied into both arms of `if mask is not None:`)
    "swinv2_tiny_window8_256": (
        "swin_transformer_v2", 1, "scale=logit_scale, mask=relative_position_bias.unsqueeze(0)",
        {"img_size": 64, "window_size": 4, "embed_dim": 24, "depths": [2, 2], "num_heads": [2, 4]}, 64,
    ),
}

WORKER = textwrap.dedent(
    """\
    import json, sys, types
    sys.path.insert(0, sys.argv[1])
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import torch, timm
    import adopter_kernels
    from adopter_kernels.equivalence import compare_models, default_dtype, seeded

    model, module, path, size = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[6])
    kwargs = {"num_classes": 10, **json.loads(sys.argv[5])}
    rewritten = types.ModuleType(f"timm.models._adp010_{module}")
    rewritten.__package__ = "timm.models"
    sys.modules[rewritten.__name__] = rewritten  # timm's register_model looks the defining module up
    with open(path, encoding="utf-8") as handle:
        exec(compile(handle.read(), path, "exec"), rewritten.__dict__)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = lambda *a, **k: calls.append(1) or sdpa(*a, **k)
    with default_dtype(torch.float64), seeded(0):
        original = timm.create_model(model, **kwargs)
        fused = getattr(rewritten, model)(**kwargs)
        image = torch.randn(2, 3, size, size)
    reports = {}
    for backend in ("auto", "attention_core=sdpa"):
        with adopter_kernels.use_backend(backend):
            report = compare_models(original, fused, (image,))
        reports[backend] = [report.ok, report.compared, report.format()]
    print(json.dumps({"reports": reports, "sdpa_calls": len(calls)}))
    """
)


@pytest.mark.parametrize("model", list(MODELS))
def test_rewritten_timm_attention_is_equivalent(model: str, tmp_path: Path) -> None:
    require(VISION_DIR)
    module, sites, passed, kwargs, size = MODELS[model]
    source_path = VISION_DIR / "timm" / "models" / f"{module}.py"
    result = rewrite_source(source_path.read_text(encoding="utf-8"), ["ADP010"], path=str(source_path))
    assert len(result.findings) == sites
    assert result.code.count(passed) == sites
    rewritten = tmp_path / f"{module}.py"
    rewritten.write_text(result.code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("ADOPTER_KERNELS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(VISION_DIR), model, module, str(rewritten), json.dumps(kwargs), str(size)],
        env=env, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    for backend, (ok, compared, text) in outcome["reports"].items():
        assert ok, f"{backend}: {text}"
        assert compared > 100
    assert outcome["sdpa_calls"] > 0  # the forced run took the SDPA path


ATTENTION2D_WORKER = textwrap.dedent(
    """\
    import json, sys, types
    sys.path.insert(0, sys.argv[1])
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import torch, timm.layers
    import adopter_kernels
    from adopter_kernels.equivalence import compare_models, default_dtype, seeded

    rewritten = types.ModuleType("timm.layers._adp010_attention2d")
    rewritten.__package__ = "timm.layers"
    with open(sys.argv[2], encoding="utf-8") as handle:
        exec(compile(handle.read(), sys.argv[2], "exec"), rewritten.__dict__)
    reports = {}
    for masked in (False, True):
        with default_dtype(torch.float64), seeded(0):
            original = timm.layers.Attention2d(32, num_heads=4, attn_drop=0.25)
            fused = rewritten.Attention2d(32, num_heads=4, attn_drop=0.25)
            image = torch.randn(2, 32, 5, 6)
            mask = torch.randn(2, 4, 30, 30) if masked else None
        for model in (original, fused):
            model.fused_attn = False  # the eager branch, where the rewrite is
        for backend in ("auto", "attention_core=sdpa"):
            with adopter_kernels.use_backend(backend):
                report = compare_models(original, fused, (image,), {"attn_mask": mask})
            reports[f"{backend} masked={masked}"] = [report.ok, report.compared, report.format()]
    print(json.dumps(reports))
    """
)


def test_rewritten_attention2d_with_optional_mask_is_equivalent(tmp_path: Path) -> None:
    require(VISION_DIR)
    source_path = VISION_DIR / "timm" / "layers" / "attention2d.py"
    result = rewrite_source(source_path.read_text(encoding="utf-8"), ["ADP010"], path=str(source_path))
    assert [f.cls for f in result.findings] == ["MultiQueryAttention2d", "Attention2d"]
    assert "scale=q.size(-1) ** -0.5, mask=attn_mask, dropout=self.attn_drop" in result.code
    rewritten = tmp_path / "attention2d.py"
    rewritten.write_text(result.code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("ADOPTER_KERNELS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, "-c", ATTENTION2D_WORKER, str(VISION_DIR), str(rewritten)],
        env=env, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    for case, (ok, compared, text) in json.loads(done.stdout.strip().splitlines()[-1]).items():
        assert ok, f"{case}: {text}"
        assert compared > 10

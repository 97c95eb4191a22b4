"""Real vit-pytorch models (1.26.11, `make model-zoo`) rewritten with every rule and run against the originals. Most
of its attention cores write both products with `torch.einsum` (ADP010's einsum variants); its `vit.py` the `@`
form with an `nn.Softmax` layer. Each model file is rewritten here, executed as a module of the installed package
in a fresh process, built in float64 with the original's weights (`strict=True`), and compared in eval and training
(outputs, gradients), under `auto` and with SDPA forced. LeVJEPA-ND's attention core is a module-level function
with an optional mask (`nd_attention`); ViTDetPool's prepares its mask under the `if` that applies it; the
sparse-gating ViT's writes both products with einops' `einsum(q, k, pattern)`; MaxViT's and JetViT's window
attention call their softmax and its dropout as one `nn.Sequential`, passed to the kernel whole. ATS's attention is
refused, and the reason names the `if` that blocks it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from adopter_codemods.api import refused_sites, rewrite_source
from model_zoo import ROOT, VISION_DIR, VIT_PYTORCH_DIR, require

IMAGE = [2, 3, 32, 32]
# LeVJEPA-ND's Attention calls the module-level `nd_attention`, whose optional dense mask is absorbed: its inputs
# (x, rotary_emb, pos, block_mask, dense_mask), an expression the worker evaluates (each query sees itself).
LEVJEPA_INPUTS = "(torch.randn(2, 6, 32), None, None, None, (torch.rand(2, 6, 6) > 0.4) | torch.eye(6, dtype=torch.bool))"
# ViTDetPool's Attention prepares its optional key mask under `if exists(mask):` (rearrange, a named fill value):
# its inputs (x, mask), the second sample padding its last two keys.
DETPOOL_INPUTS = "(torch.randn(2, 6, 32), torch.arange(6) < torch.tensor([[6], [4]]))"
# module -> (class, constructor keywords, input shape or inputs expression, ADP010 sites, of which einsum cores)
MODELS: dict[str, tuple[str, dict[str, object], list[int] | str, int, int]] = {
    "vit": ("ViT", dict(image_size=32, patch_size=8, num_classes=10, dim=32, depth=2, heads=2, mlp_dim=64,
                        dropout=0.1), IMAGE, 1, 0),
    "cross_vit": ("CrossViT", dict(image_size=32, num_classes=10, depth=1, sm_dim=32, sm_patch_size=8,
                                   sm_enc_depth=1, sm_enc_heads=2, sm_enc_mlp_dim=64, lg_dim=48, lg_patch_size=16,
                                   lg_enc_depth=1, lg_enc_heads=2, lg_enc_mlp_dim=64, cross_attn_depth=1,
                                   cross_attn_heads=2, dropout=0.1, emb_dropout=0.1), IMAGE, 1, 1),
    "cvt": ("CvT", dict(num_classes=10, s1_emb_dim=16, s2_emb_dim=24, s3_emb_dim=32, s3_depth=1, s2_heads=2,
                        s3_heads=2, dropout=0.1), [2, 3, 64, 64], 1, 1),
    "pit": ("PiT", dict(image_size=32, patch_size=4, dim=32, num_classes=10, depth=(1, 1), heads=2, mlp_dim=64,
                        dropout=0.1, emb_dropout=0.1), IMAGE, 1, 1),
    "xcit": ("XCiT", dict(image_size=32, patch_size=8, num_classes=10, dim=32, depth=2, cls_depth=1, heads=2,
                          mlp_dim=64, dropout=0.1, emb_dropout=0.1, layer_dropout=0.0), IMAGE, 2, 2),
    "twins_svt": ("TwinsSVT", dict(num_classes=10, s1_emb_dim=16, s1_patch_size=4, s1_local_patch_size=2,
                                   s1_global_k=2, s1_depth=1, s2_emb_dim=16, s2_patch_size=2, s2_local_patch_size=2,
                                   s2_global_k=2, s2_depth=1, s3_emb_dim=16, s3_patch_size=2, s3_local_patch_size=2,
                                   s3_global_k=1, s3_depth=1, s4_emb_dim=16, s4_patch_size=1, s4_local_patch_size=1,
                                   s4_global_k=1, s4_depth=1, peg_kernel_size=3, dropout=0.1), IMAGE, 2, 2),
    "nest": ("NesT", dict(image_size=32, patch_size=4, dim=16, heads=2, num_hierarchies=2, block_repeats=(1, 1),
                          num_classes=10), IMAGE, 1, 1),
    "cct": ("CCT", dict(img_size=32, embedding_dim=32, n_conv_layers=1, kernel_size=3, stride=1, padding=1,
                        pooling_kernel_size=3, pooling_stride=2, pooling_padding=1, num_layers=2, num_heads=2,
                        mlp_ratio=2.0, num_classes=10, positional_embedding="learnable"), IMAGE, 1, 1),
    "rvt": ("RvT", dict(image_size=32, patch_size=8, num_classes=10, dim=32, depth=2, heads=2, mlp_dim=64,
                        dropout=0.1, use_rotary=True, use_ds_conv=True, use_glu=True), IMAGE, 1, 1),
    "levjepa_nd": ("Attention", dict(dim=32, heads=2, dim_head=16, dropout=0.1), LEVJEPA_INPUTS, 1, 0),
    "vit_detpool": ("Attention", dict(dim=32, heads=2, dim_head=16, dropout=0.1), DETPOOL_INPUTS, 1, 0),
    # both products written with einops' tensor-first `einsum(q, k, pattern)`, a learned log-mask added
    "simple_vit_with_sparse_gating": (
        "Attention", dict(dim=32, heads=2, dim_head=16, dim_mask=4, num_register_tokens=2), [2, 6, 32], 1, 1
    ),
    # its relative position bias is added under `if exists(rel_pos_bias):` (passed to the call as the mask)
    "regionvit": ("RegionViT", dict(dim=(16, 16, 16, 16), depth=(1, 1, 1, 1), window_size=2, num_classes=10,
                                    local_patch_size=4, attn_dropout=0.1), [2, 3, 64, 64], 1, 1),
    # the softmax and its dropout are one layer, `self.attend = nn.Sequential(nn.Softmax(dim = -1),
    # nn.Dropout(dropout))`, passed whole (`softmax=self.attend`); a relative position bias as the mask
    "max_vit": ("MaxViT", dict(num_classes=10, dim=16, depth=(1, 1), dim_head=8, window_size=2, dropout=0.1),
                IMAGE, 1, 1),
    "max_vit_with_registers": ("MaxViT", dict(num_classes=10, dim=16, depth=(1, 1), dim_head=8, window_size=2,
                                              dropout=0.1, num_register_tokens=2), IMAGE, 1, 1),
    # JetViT's window attention (the same Sequential, einops' einsum); its other Attention is vit.py's
    "jet_vit": ("WindowAttention", dict(dim=32, h_s=4, w_s=4, dim_head=16, dropout=0.1, window_size=2),
                [2, 16, 32], 2, 1),
}

WORKER = textwrap.dedent(
    """\
    import ast, importlib, json, sys, types
    sys.path[:0] = [sys.argv[1], sys.argv[3]]
    # vit_pytorch/__init__.py imports dino.py, which imports torchvision (tests/model_zoo.py's import_vision)
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import torch
    import adopter_kernels
    from adopter_kernels.equivalence import compare_models, default_dtype, seeded

    cases = ast.literal_eval(sys.argv[2])  # tuples stay tuples (PiT's `depth`)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = lambda *a, **k: calls.append(1) or sdpa(*a, **k)
    out = {}
    for module, (cls, kwargs, shape, path) in cases.items():
        rewritten = types.ModuleType(f"vit_pytorch._adopter_{module}")
        rewritten.__package__ = "vit_pytorch"
        with open(path, encoding="utf-8") as handle:
            exec(compile(handle.read(), path, "exec"), rewritten.__dict__)
        original = importlib.import_module(f"vit_pytorch.{module}")
        reports = {}
        for backend in ("auto", "attention_core=sdpa"):
            with default_dtype(torch.float64), seeded(0):
                a = getattr(original, cls)(**kwargs)
            with default_dtype(torch.float64), seeded(0):
                b = getattr(rewritten, cls)(**kwargs)
            with default_dtype(torch.float64), seeded(1):
                inputs = eval(shape) if isinstance(shape, str) else (torch.randn(*shape),)
            calls.clear()
            with adopter_kernels.use_backend(backend):
                report = compare_models(a, b, inputs)
            reports[backend] = [report.ok, report.compared, report.format(), len(calls)]
        out[module] = reports
    print(json.dumps(out))
    """
)


def test_rewritten_vit_pytorch_models_are_equivalent(tmp_path: Path) -> None:
    require(VIT_PYTORCH_DIR)
    require(VISION_DIR)
    cases = {}
    for module, (cls, kwargs, shape, sites, einsum_sites) in MODELS.items():
        source_path = VIT_PYTORCH_DIR / "vit_pytorch" / f"{module}.py"
        result = rewrite_source(source_path.read_text(encoding="utf-8"), ["all"], path=str(source_path))
        assert sum(f.code == "ADP010" for f in result.findings) == sites, module
        assert result.code.count("score_equation=") == einsum_sites, module
        rewritten = tmp_path / f"{module}.py"
        rewritten.write_text(result.code, encoding="utf-8")
        cases[module] = (cls, kwargs, shape, str(rewritten))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("ADOPTER_KERNELS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(VIT_PYTORCH_DIR), repr(cases), str(VISION_DIR)],
        env=env, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(outcome) == sorted(MODELS)
    for module, reports in outcome.items():
        for backend, (ok, compared, text, sdpa_calls) in reports.items():
            assert ok, f"{module}, {backend}: {text}"
            # one attention layer there
            layer = module in ("levjepa_nd", "vit_detpool", "simple_vit_with_sparse_gating", "jet_vit")
            assert compared > (5 if layer else 20), (module, backend, compared)
        assert reports["attention_core=sdpa"][3] > 0, module  # the forced run took the SDPA path


def test_ats_attention_is_refused_at_the_token_sampler_if() -> None:
    """ats_vit.py's Attention: between the softmax and the product, `if exists(self.output_num_tokens) and ...:`
    rebinds the probabilities through the token sampler; its test calls a function, so no fallback plan can test it
    before the region: the refusal names that `if`, not the optional mask's block."""
    require(VIT_PYTORCH_DIR)
    source_path = VIT_PYTORCH_DIR / "vit_pytorch" / "ats_vit.py"
    source = source_path.read_text(encoding="utf-8")
    refused = refused_sites(source, ["ADP010"], path=str(source_path))
    assert len(refused) == 1 and refused[0].cause_line is not None
    line = source.splitlines()[refused[0].cause_line - 1]
    assert line.strip().startswith("if exists(self.output_num_tokens)"), line
    assert "this `if` stands between the matched statements" in refused[0].reason

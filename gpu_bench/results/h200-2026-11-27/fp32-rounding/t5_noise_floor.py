"""fp32 noise floor of random-init T5-base (gpu_bench shapes) under a rounding-only change.

A: vanilla modeling_t5 (fp32)                     -- the reference, as gpu_bench builds it
B: same source, softmax line replaced by exp(x - max)/sum (mathematically identical, other rounding)
C: A's weights and inputs in float64 ("truth")
[D: the codemod's ADP002 / ADP004 variants on CPU, fp32, optional --variants]

Gradients come from the same procedure as adopter_kernels.equivalence.compare_models (eval mode, dropout 0,
seeded random cotangent on every output); the verdict uses compare_models itself with rtol 1e-4, atol 1e-5.
Run:  PYTHONPATH=. python gpu_bench/results/h200-2026-11-27/fp32-rounding/t5_noise_floor.py --batch 2 --seq 256
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from adopter_kernels.equivalence import _largest_gradient, _run, compare_models, load_source_as_module, iter_leaves
from gpu_bench.suite import SUITE
from gpu_bench.runner import _seeded

RTOL, ATOL = 1e-4, 1e-5
ORIG = "nn.functional.softmax(scores.float(), dim=-1)"
ALT = "_alt_softmax(scores.float(), dim=-1)"
ALT_DEF = """

def _alt_softmax(x, dim):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)
"""


class MaskedReLU(torch.nn.Module):
    """ReLU whose on/off pattern is imposed (taken from another run): h * mask."""

    def __init__(self, mask):
        super().__init__()
        self.mask = mask

    def forward(self, h):
        return h * self.mask.to(h.dtype)


def record_relu_signs(model):
    """Forward hooks on every FFN ``act``: store (input > 0) per layer in the returned dict."""
    signs, handles = {}, []
    for name, module in model.named_modules():
        if name.endswith("DenseReluDense.act"):
            handles.append(module.register_forward_hook(
                lambda mod, inp, out, name=name: signs.__setitem__(name, (inp[0].detach() > 0, inp[0].detach().abs()))))
    return signs, handles


def grads(model, args, kwargs, seed=0):
    model.eval()
    _, _, leaves = _run(model, args, kwargs, seed, lambda: __import__("contextlib").nullcontext())
    outs = {p: t.detach() for p, t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point()}
    g = {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}
    return outs, g, _largest_gradient(model.parameters())


def summarize(label, ref_outs, ref_g, scale, outs, g, top=6):
    tol = ATOL + RTOL * scale
    out_diff = max(float((ref_outs[k].double() - outs[k].double()).abs().max()) for k in ref_outs)
    out_mag = max(float(ref_outs[k].double().abs().max()) for k in ref_outs)
    rows = []
    flagged = 0
    for n in ref_g:
        a, b = ref_g[n].double(), g[n].double()
        d = float((a - b).abs().max())
        # torch.allclose(actual, expected, rtol, atol=tol) as in _compare_tensor
        ok = bool(((b - a).abs() <= tol + RTOL * a.abs()).all())
        flagged += not ok
        rows.append((d, n, float(a.abs().max()), ok))
    rows.sort(reverse=True)
    print(f"\n== {label}")
    print(f"  outputs: max|out| {out_mag:.4g}, max abs diff {out_diff:.3e}")
    print(f"  largest |grad| of reference pass: {scale:.4g}; grad tolerance atol+rtol*max = {tol:.3e}")
    print(f"  param grads: max abs diff {rows[0][0]:.3e} ({rows[0][0] / scale:.2e} of max |grad|); "
          f"{flagged}/{len(rows)} params would be flagged")
    for d, n, m, ok in rows[:top]:
        print(f"    {n:60s} diff {d:.3e}  max|g| {m:.3e}  {'ok' if ok else 'FLAG'}")
    return rows[0][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--no-f64", action="store_true")
    ap.add_argument("--variants", action="store_true", help="also run the codemod's ADP002/ADP004 variants")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--act", default="relu", help="T5 feed_forward_proj: relu (gpu_bench) or gelu (smooth control)")
    ap.add_argument("--transplant", action="store_true",
                    help="float64 run with A's fp32 ReLU on/off pattern imposed (removes ReLU flips)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = SUITE["t5"]
    path = spec.source_path()
    src = path.read_text()
    assert src.count(ORIG) == 1
    mod_a = load_source_as_module(src, "t5_vanilla", package=spec.package, path=str(path))
    mod_b = load_source_as_module(src.replace(ORIG, ALT) + ALT_DEF, "t5_altsoftmax", package=spec.package,
                                  path=str(path) + "[alt]")
    args, kwargs = _seeded(0, lambda: spec.inputs(mod_a, "base", a.batch, a.seq))
    print(f"T5-base shapes, batch {a.batch}, seq {a.seq}, torch {torch.__version__}, threads {torch.get_num_threads()}")

    t = time.time()
    if a.act != "relu":
        import transformers
        def build(module):
            kw = dict(__import__("gpu_bench.suite").suite._HF_CONFIGS["t5"]["base"], use_cache=False,
                      dropout_rate=0.0, feed_forward_proj=a.act)
            return module.T5Model(transformers.T5Config(**kw))
    else:
        def build(module):
            return spec.build(module, "base", False)
    print(f"FFN activation: {a.act}")
    model_a = _seeded(0, lambda: build(mod_a))
    model_b = _seeded(0, lambda: build(mod_b))
    model_b.load_state_dict(model_a.state_dict(), strict=True)

    # Harness verdict, exactly as gpu_bench's _check (eval mode only; train with dropout 0 computes the same).
    rep = compare_models(model_a, model_b, *(args, kwargs), rtol=RTOL, atol=ATOL, seed=0, modes=("eval",))
    print(f"compare_models(A, B) fp32: ok={rep.ok}, mismatches={len(rep.mismatches)}, "
          f"max_abs_diff={rep.max_abs_diff} ({time.time() - t:.0f}s)")
    for m in rep.mismatches[:5]:
        print("   ", m)

    signs_a, h = record_relu_signs(model_a)
    outs_a, g_a, scale_a = grads(model_a, args, kwargs)
    for x in h: x.remove()
    outs_a2, g_a2, _ = grads(model_a, args, kwargs)
    summarize("A vs A (rerun: determinism)", outs_a, g_a, scale_a, outs_a2, g_a2, top=1)
    signs_b, h = record_relu_signs(model_b)
    outs_b, g_b, _ = grads(model_b, args, kwargs)
    for x in h: x.remove()
    summarize("A fp32 vs B fp32 (softmax rewritten as exp/sum, rounding only)", outs_a, g_a, scale_a, outs_b, g_b)
    del model_b, g_a2, outs_a2
    print(f"  ({time.time() - t:.0f}s so far)")

    if a.variants:
        from gpu_bench.variants import default_rewriter, make_variants
        for v in make_variants(src, str(path), default_rewriter(), ["ADP002", "ADP004"]):
            if v.name == "vanilla" or v.name == "all":
                continue
            mod_v = load_source_as_module(v.source, f"t5_{v.name.lower()}", package=spec.package,
                                          path=f"{path}[{v.name}]")
            model_v = _seeded(0, lambda: spec.build(mod_v, "base", False))
            model_v.load_state_dict(model_a.state_dict(), strict=True)
            outs_v, g_v, _ = grads(model_v, args, kwargs)
            summarize(f"A fp32 vs codemod variant {v.name} fp32 on CPU", outs_a, g_a, scale_a, outs_v, g_v)
            del model_v
        print(f"  ({time.time() - t:.0f}s so far)")

    if not a.no_f64:
        model_c = copy.deepcopy(model_a).double()
        del model_a
        signs_c, h = record_relu_signs(model_c)
        outs_c, g_c, scale_c = grads(model_c, args, kwargs)
        for x in h: x.remove()
        if a.act == "relu":
            total = sum(v[0].numel() for v in signs_c.values())
            eps_gap = min(float(v[1].min()) for v in signs_c.values())
            for lbl, sg in (("A", signs_a), ("B", signs_b)):
                flips = {k: int((sg[k][0] != signs_c[k][0]).sum()) for k in signs_c}
                nz = {k: n for k, n in flips.items() if n}
                worst = max((float(signs_c[k][1][sg[k][0] != signs_c[k][0]].max()) for k in nz), default=0.0)
                print(f"ReLU on/off flips, {lbl} fp32 vs float64: {sum(flips.values())} of {total} pre-activations "
                      f"(largest |h| at a flip {worst:.2e}); layers: {nz}")
            print(f"smallest |pre-activation| anywhere (float64): {eps_gap:.2e}")
        print(f"\nfloat64 largest |grad| {scale_c:.6g} (fp32: {scale_a:.6g})")
        summarize("C float64 (truth) vs A fp32 [reference = C]", outs_c, g_c, scale_c,
                  {k: v.double() for k, v in outs_a.items()}, {k: v.double() for k, v in g_a.items()})
        summarize("C float64 (truth) vs B fp32 [reference = C]", outs_c, g_c, scale_c,
                  {k: v.double() for k, v in outs_b.items()}, {k: v.double() for k, v in g_b.items()})
        if a.transplant and a.act == "relu":
            for name, module in model_c.named_modules():
                if name.endswith("DenseReluDense"):
                    module.act = MaskedReLU(signs_a[name + ".act"][0])
            outs_t, g_t, scale_t = grads(model_c, args, kwargs)
            summarize("C' float64 with A's ReLU on/off pattern imposed [reference] vs A fp32", outs_t, g_t, scale_t,
                      {k: v.double() for k, v in outs_a.items()}, {k: v.double() for k, v in g_a.items()})
    print(f"\ntotal {time.time() - t:.0f}s")


if __name__ == "__main__":
    main()

"""fp32 noise floor of gpu_bench's ResNet-18-like model (base size, 224x224), eval mode.

A: vanilla fp32; B: the codemod's ADP007 variant (Conv->BN folded in eval, runs folded on CPU too) in fp32;
C: vanilla in float64 ("truth"); C': float64 with A's ReLU on/off pattern and max-pool choices imposed.
Gradients as adopter_kernels.equivalence.compare_models computes them (seeded random cotangent), eval mode.
Run:  PYTHONPATH=. python gpu_bench/results/h200-2026-11-27/fp32-rounding/resnet_noise_floor.py --batch 8
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import nn

from adopter_kernels.equivalence import load_source_as_module
from gpu_bench.runner import _seeded
from gpu_bench.suite import SUITE
from t5_noise_floor import ATOL, RTOL, grads, summarize


class Recorder:
    """Pre-hooks on every ReLU (sign of its input, per call in order) and MaxPool2d (its argmax indices)."""

    def __init__(self, model):
        self.relu, self.pool, self.handles = [], [], []
        for m in model.modules():
            if isinstance(m, nn.ReLU):
                self.handles.append(m.register_forward_pre_hook(
                    lambda mod, inp: self.relu.append((inp[0].detach() > 0, inp[0].detach().abs()))))
            elif isinstance(m, nn.MaxPool2d):
                self.handles.append(m.register_forward_pre_hook(lambda mod, inp: self.pool.append(
                    nn.functional.max_pool2d(inp[0].detach(), mod.kernel_size, mod.stride, mod.padding,
                                             return_indices=True)[1])))

    def remove(self):
        for h in self.handles:
            h.remove()


class ImposedReLU(nn.Module):
    def __init__(self, masks):
        super().__init__()
        self.masks = masks  # shared list, consumed in call order

    def forward(self, x):
        return x * self.masks.pop(0).to(x.dtype)


class ImposedMaxPool(nn.Module):
    def __init__(self, indices):
        super().__init__()
        self.indices = indices

    def forward(self, x):
        idx = self.indices.pop(0)
        return x.flatten(2).gather(2, idx.flatten(2)).view_as(idx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = SUITE["resnet"]
    path = spec.source_path()
    src = path.read_text()
    mod_a = load_source_as_module(src, "resnet_vanilla", package=spec.package, path=str(path))
    from gpu_bench.variants import default_rewriter, make_variants
    (variant,) = [v for v in make_variants(src, str(path), default_rewriter(), ["ADP007"]) if v.name == "ADP007"]
    mod_b = load_source_as_module(variant.source, "resnet_adp007", package=spec.package, path=f"{path}[ADP007]")
    args, kwargs = _seeded(0, lambda: spec.inputs(mod_a, "base", a.batch, None))
    print(f"ResNet base, batch {a.batch}, 224x224, torch {torch.__version__}, threads {torch.get_num_threads()}")
    t = time.time()
    model_a = _seeded(0, lambda: spec.build(mod_a, "base", False))
    model_b = _seeded(0, lambda: spec.build(mod_b, "base", False))
    model_b.load_state_dict(model_a.state_dict(), strict=True)

    rec_a = Recorder(model_a)
    outs_a, g_a, scale_a = grads(model_a, args, kwargs)
    rec_a.remove()
    rec_b = Recorder(model_b)
    outs_b, g_b, _ = grads(model_b, args, kwargs)
    rec_b.remove()
    summarize("A fp32 vs B = ADP007 folded fp32", outs_a, g_a, scale_a, outs_b, g_b)

    model_c = copy.deepcopy(model_a).double()
    args64 = tuple(x.double() for x in args)
    rec_c = Recorder(model_c)
    outs_c, g_c, scale_c = grads(model_c, args64, kwargs)
    rec_c.remove()
    d = lambda o: {k: v.double() for k, v in o.items()}
    summarize("C float64 (truth) vs A fp32", outs_c, g_c, scale_c, d(outs_a), d(g_a))
    summarize("C float64 (truth) vs B fp32 (ADP007)", outs_c, g_c, scale_c, d(outs_b), d(g_b))
    for lbl, rec in (("A", rec_a), ("B", rec_b)):
        flips = sum(int((x[0] != y[0]).sum()) for x, y in zip(rec.relu, rec_c.relu))
        per_call = [int((x[0] != y[0]).sum()) for x, y in zip(rec.relu, rec_c.relu)]
        total = sum(x[0].numel() for x in rec_c.relu)
        worst = max((float(y[1][x[0] != y[0]].max()) for x, y in zip(rec.relu, rec_c.relu) if (x[0] != y[0]).any()),
                    default=0.0)
        exact0 = sum(int((y[1] == 0).sum()) for y in rec_c.relu)
        pool = sum(int((x != y).sum()) for x, y in zip(rec.pool, rec_c.pool))
        print(f"\nReLU on/off flips {lbl} fp32 vs float64: {flips} of {total} (largest float64 |x| at a flip "
              f"{worst:.2e}; inputs exactly 0 in float64: {exact0}); per ReLU call (stem first): {per_call}; "
              f"max-pool argmax changes: {pool} of {rec_c.pool[0].numel()}")
    model_c2 = copy.deepcopy(model_c)

    # C': float64 with A's discrete decisions imposed
    masks = [m[0] for m in rec_a.relu]
    idx = list(rec_a.pool)
    for parent in list(model_c.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.ReLU):
                setattr(parent, name, ImposedReLU(masks))
            elif isinstance(child, nn.MaxPool2d):
                setattr(parent, name, ImposedMaxPool(idx))
    outs_t, g_t, scale_t = grads(model_c, args64, kwargs)
    assert not masks and not idx
    summarize("C' float64 with A's ReLU/max-pool decisions imposed vs A fp32", outs_t, g_t, scale_t, d(outs_a), d(g_a))
    masks = [m[0] for m in rec_b.relu]
    idx = list(rec_b.pool)
    for parent in list(model_c2.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.ReLU):
                setattr(parent, name, ImposedReLU(masks))
            elif isinstance(child, nn.MaxPool2d):
                setattr(parent, name, ImposedMaxPool(idx))
    outs_t, g_t, scale_t = grads(model_c2, args64, kwargs)
    assert not masks and not idx
    summarize("C'' float64 with B's ReLU/max-pool decisions imposed vs B fp32", outs_t, g_t, scale_t, d(outs_b), d(g_b))
    print(f"\ntotal {time.time() - t:.0f}s")


if __name__ == "__main__":
    main()

"""vit-pytorch's MaxViT (1.26.11, `make model-zoo`) rewritten by ADP010 (its softmax-dropout nn.Sequential passed
whole) and by every rule, each timed call by call against a vanilla twin on CPU, one thread, with gpu_bench's
paired timing (`gpu_bench.runner.time_pair`): MaxViT-T's layout (dim 64, depth (2, 2, 5, 2), 7x7 windows: rows of
49 keys) at 224x224. From the repository root:

    OMP_NUM_THREADS=1 python gpu_bench/results/cpu-2026-11-28/run_cpu_maxvit.py [BATCH] [REPEATS]
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / ".cache" / "vit-pytorch"), str(ROOT / ".cache" / "vision-models")]
# vit_pytorch/__init__.py imports dino.py, which imports torchvision (tests/model_zoo.py does the same)
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))

from adopter_codemods.api import rewrite_source  # noqa: E402
from adopter_kernels.equivalence import compare_models, default_dtype, seeded  # noqa: E402
from gpu_bench.runner import BenchConfig, time_pair  # noqa: E402
from gpu_bench.timing import paired_speedup  # noqa: E402

KWARGS = dict(num_classes=1000, dim=64, depth=(2, 2, 5, 2), dim_head=32, window_size=7, dropout=0.1)


def _module(code: str, name: str) -> types.ModuleType:
    module = types.ModuleType(f"vit_pytorch.{name}")
    module.__package__ = "vit_pytorch"
    exec(compile(code, f"max_vit[{name}]", "exec"), module.__dict__)
    return module


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    torch.set_num_threads(1)
    path = ROOT / ".cache" / "vit-pytorch" / "vit_pytorch" / "max_vit.py"
    source = path.read_text(encoding="utf-8")
    variants = {"vanilla": source}
    for rules in (["ADP010"], ["all"]):
        result = rewrite_source(source, rules, path=str(path))
        variants["+".join(rules)] = result.code
        print(f"# {'+'.join(rules)}: {sorted(f.code for f in result.findings)}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"# commit {commit.strip()}, torch {torch.__version__}, batch {batch}, 224x224, {repeats} paired calls, "
          f"1 warm-up, one thread; MaxViT {KWARGS}")
    modules = {name: _module(code, name.replace("+", "_")) for name, code in variants.items()}
    with seeded(0):
        vanilla = modules["vanilla"].MaxViT(**KWARGS)
    state = vanilla.state_dict()
    with seeded(1):
        images = torch.randn(batch, 3, 224, 224)
    config = BenchConfig(size="base", device=torch.device("cpu"), dtype="fp32", models=(), warmup=1, repeats=repeats)
    for name, module in modules.items():
        model = module.MaxViT(**KWARGS)
        model.load_state_dict(state, strict=True)
        if name != "vanilla":  # a float64 check on a small batch first: same outputs and gradients
            with default_dtype(torch.float64), seeded(0):
                a, b = modules["vanilla"].MaxViT(**KWARGS), module.MaxViT(**KWARGS)
                x = torch.randn(2, 3, 224, 224)
            b.load_state_dict(a.state_dict(), strict=True)
            report = compare_models(a, b, (x,), rtol=1e-9, atol=1e-9)
            print(f"# {name}: equivalence {'ok' if report.ok else report.format()}")
        timings = time_pair(vanilla, model, ((images,), {}), config, batch)
        cells = []
        for mode in ("train", "inference"):
            ratio = paired_speedup(*timings[mode])
            cells.append(f"{mode} {ratio['median']:.3f}x [{ratio['q1']:.3f}-{ratio['q3']:.3f}]")
        print(f"{name:10s} {'; '.join(cells)}", flush=True)


if __name__ == "__main__":
    main()

"""Where the dispatch runs the original computation, a rewritten model runs exactly the original's operators.

Every model of the ``gpu_bench`` suite (tiny size), every rewritten variant (one per applicable rule, and all rules
together), every kernel forced to its reference path: the aten operators the model runs, each with the dtypes and
shapes of its tensor arguments, are the vanilla model's, as many times each, in inference and in a training step
(forward and backward), in float32 and under bfloat16 autocast. So on any device the only extra work of a rewritten
model there is the Python of its kernel calls (``benchmarks/bench_host_overhead.py`` measures that cost).

The order may differ (a packed projection's reference computes q, k and v where the code asked for them; ADP010's
mask comparison moves into the kernel call), and the operands of ``add``/``mul`` may be swapped (``residual + x``
becomes ``x + residual``: the same operator, and IEEE addition and multiplication commute exactly).
"""

from __future__ import annotations

import contextlib
import types
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from adopter_kernels import use_backend  # noqa: E402
from gpu_bench.suite import SUITE, ModelSpec, SourceUnavailable, load_variants, synthetic_loss  # noqa: E402

_COMMUTATIVE = {"aten.add.Tensor", "aten.mul.Tensor"}

Signature = tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]


class _Operators(TorchDispatchMode):
    """Counts each aten operator call with the dtypes and shapes of its tensor arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[Signature] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        tensors = [(str(a.dtype), tuple(a.shape)) for a in args if isinstance(a, torch.Tensor)]
        name = str(func)
        self.calls[(name, tuple(sorted(tensors) if name in _COMMUTATIVE else tensors))] += 1
        return func(*args, **(kwargs or {}))


def _operators(spec: ModelSpec, module: types.ModuleType, mode: str, dtype: str) -> Counter[Signature]:
    torch.manual_seed(0)
    model = spec.build(module, "tiny", True)
    torch.manual_seed(0)
    args, kwargs = spec.inputs(module, "tiny", 2, spec.seq_len["tiny"])
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()
    recorder = _Operators()
    if mode == "infer":
        model.eval()
        with torch.inference_mode(), autocast, recorder:
            model(*args, **kwargs)
    else:
        model.train()
        with recorder:
            with autocast:
                output = model(*args, **kwargs)
            synthetic_loss(output).backward()
    return recorder.calls


@pytest.mark.parametrize("name", sorted(SUITE))
def test_the_reference_path_runs_the_original_operators(name: str) -> None:
    spec = SUITE[name]
    try:
        modules = load_variants(spec, "ops")
    except SourceUnavailable as exc:
        pytest.skip(str(exc))
    assert len(modules) > 1, f"{name}: no rule applies to the suite model"
    mismatches = []
    with use_backend("reference"):
        for mode in ("infer", "train"):
            for dtype in ("fp32", "bf16"):
                vanilla = _operators(spec, modules["vanilla"], mode, dtype)
                for variant, module in modules.items():
                    if variant == "vanilla":
                        continue
                    calls = _operators(spec, module, mode, dtype)
                    if calls != vanilla:
                        extra, missing = calls - vanilla, vanilla - calls
                        mismatches.append(f"{variant} {mode} {dtype}: extra {dict(extra)}, missing {dict(missing)}")
    assert not mismatches, "\n".join(mismatches)

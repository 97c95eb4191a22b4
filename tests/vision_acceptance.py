"""Issue 11 acceptance harness: Conv->BN pairs of real torchvision and timm models, rewritten by the real engine.

``run_acceptance(workdir)`` does what a user would do and checks the result:

1. a fresh process imports the installed torchvision 0.28.0 / timm 1.0.31 (``model_zoo.VISION_DIR``), builds each
   model of ``MODELS`` in float64 from a fixed seed, saves its ``state_dict``, runs a train step and an eval step
   (outputs, input and parameter gradients, buffers afterwards) and counts the Conv->BN pairs that execute;
2. the torchvision and timm package trees are copied to ``workdir``; the files defining the models' module classes
   are scanned (ADP007/ADP008 findings = sites in source) and rewritten with ``python -m adopter_codemods rewrite``
   (every built-in rule, as a user runs it);
3. a second fresh process imports the rewritten copy, builds the same models, loads the ORIGINAL ``state_dict``
   with ``strict=True`` and repeats the steps: train with the folded backends forced, eval with them forced (what
   CUDA runs: ``auto`` never folds on CPU), eval with ``auto``. Everything is compared with the original at
   rtol = atol = 1e-9 (a gradient against the largest gradient of its backward pass, as
   ``adopter_kernels.equivalence`` does). For ResNet-18 it also runs torchvision's fx
   ``create_feature_extractor`` on both and compares the features in eval and train.

Counting (the per-model table of the README; ``python benchmarks/vision_pairs.py`` prints it):

* **executed pair**: a call of a BatchNorm2d module (subclasses such as timm's BatchNormAct2d included) whose input
  is the very tensor object a Conv2d module (subclasses included) returned, unmodified since (same version
  counter: an in-place op between them breaks the pair). Counted with forward hooks on the original, in eval; a
  module called twice counts twice.
* **through the kernel**: executed pairs of the original whose (conv, BN) modules the rewritten model passes to
  ``adopter_kernels.conv_bn2d`` (directly or through ``FusedSequential``); counted by wrapping the kernel in the
  worker process (production code carries no counter). Kernel calls on other module pairs are counted apart.
* **folded**: calls that took the kernel's folded branch (``batch_norm._conv_bn2d_folded``) in eval.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
from model_zoo import VISION_DIR  # noqa: E402

#: (row name, library, builder name): torchvision builders with ``weights=None``, timm ``create_model`` names.
MODELS: tuple[tuple[str, str, str], ...] = (
    ("torchvision resnet18", "torchvision", "resnet18"),
    ("torchvision resnet50", "torchvision", "resnet50"),
    ("torchvision mobilenet_v2", "torchvision", "mobilenet_v2"),
    ("torchvision efficientnet_b0", "torchvision", "efficientnet_b0"),
    ("timm resnet50d", "timm", "resnet50d"),
    ("timm efficientnet_b0", "timm", "efficientnet_b0"),
    # No Conv->BN pair: here for the other rules' guarded rewrites, executed the same way (ADP006 on timm's Mlp,
    # `act_layer` and `bias=bias[0]` taken on trust; ADP006 in torchvision's block `nn.Sequential`: FusedSequential).
    ("torchvision convnext_tiny", "torchvision", "convnext_tiny"),
    ("timm convnext_atto", "timm", "convnext_atto"),
)
INPUT_SHAPE = (2, 3, 64, 64)
NUM_CLASSES = 10
FOLDED = "conv_bn2d=folded,linear_bn1d=folded"
RTOL = ATOL = 1e-9
#: Nodes torchvision's feature extractor returns from ResNet-18 (fx test, issue 14 item 4).
FEATURE_NODES = {"layer1": "layer1", "layer3.1.bn2": "late_bn", "fc": "logits"}
PACKAGES = ("torchvision", "timm")


@dataclasses.dataclass
class Row:
    """One model's line of the table, and whether the rewritten model matched the original."""

    name: str
    executed_pairs: int
    source_sites: int
    through_kernel: int
    folded: int
    other_kernel_calls: int
    compared: int
    max_abs_diff: float
    mismatches: list[str]
    #: Executed pairs that did not run through the kernel, "conv -> bn" by module name.
    missed: list[str]


# --------------------------------------------------------------------------------------------------------------
# Driver (pytest process or benchmark script): copy, scan, rewrite, two worker processes
# --------------------------------------------------------------------------------------------------------------


def _worker(*args: str) -> None:
    # One thread: on a shared 2-core machine torch's thread pool spinning under contention cost 5-10x the CPU time.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("ADOPTER_KERNELS_BACKEND", None)
    done = subprocess.run([sys.executable, str(Path(__file__)), *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"worker {args[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _engine(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "adopter_codemods", *args], cwd=tree, env=env,
                          capture_output=True, text=True)


def run_acceptance(workdir: Path) -> dict[str, Row]:
    """The whole acceptance run in ``workdir`` (a fresh directory); one ``Row`` per model of ``MODELS``."""
    original = workdir / "original"
    _worker("original", str(original))
    with open(original / "classes.json") as handle:
        classes: dict[str, list[list[str]]] = json.load(handle)  # model -> [relative file, class name]
    tree = workdir / "tree"
    for package in PACKAGES:
        shutil.copytree(VISION_DIR / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    files = sorted({file for pairs in classes.values() for file, _ in pairs})
    # Every rule, ADP007's and ADP008's too, which run only when named (their kernels are not faster by default).
    scan = _engine(tree, "scan", "--rules", "all", "--no-cache", "--format", "json", *files)
    if scan.returncode not in (0, 1):
        raise RuntimeError(f"scan failed ({scan.returncode}):\n{scan.stdout}\n{scan.stderr}")
    findings = json.loads(scan.stdout)["findings"]
    rewrite = _engine(tree, "rewrite", "--rules", "all", "--no-progress", *files)
    if rewrite.returncode != 0:
        raise RuntimeError(f"rewrite failed ({rewrite.returncode}):\n{rewrite.stdout}\n{rewrite.stderr}")
    rewritten = workdir / "rewritten.json"
    _worker("rewritten", str(tree), str(original), str(rewritten))
    with open(rewritten) as handle:
        measured: dict[str, dict[str, Any]] = json.load(handle)
    rows = {}
    for name, _, _ in MODELS:
        own = {tuple(pair) for pair in classes[name]}
        sites = sum(1 for f in findings
                    if f["code"] in ("ADP007", "ADP008") and (Path(f["path"]).as_posix(), f["class"]) in own)
        rows[name] = Row(name=name, source_sites=sites, **measured[name])
    return rows


def format_table(rows: dict[str, Row]) -> str:
    """Markdown table, one line per model."""
    lines = [
        "| model | Conv->BN pairs executed | ADP007/008 sites in its classes | pairs through conv_bn2d | "
        "folded in eval | equivalent (float64, 1e-9) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows.values():
        verdict = f"yes ({row.compared} tensors, max diff {row.max_abs_diff:.1e})" if not row.mismatches \
            else f"NO: {row.mismatches[0]}"
        lines.append(f"| {row.name} | {row.executed_pairs} | {row.source_sites} | {row.through_kernel} | "
                     f"{row.folded} | {verdict} |")
    for row in rows.values():
        if row.missed:
            shown = ", ".join(row.missed[:3]) + (f", ... ({len(row.missed)} in all)" if len(row.missed) > 3 else "")
            lines.append(f"\n{row.name}: not through the kernel: {shown}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Workers (fresh processes: the original and the rewritten packages have the same names)
# --------------------------------------------------------------------------------------------------------------


def _build(library: str, builder: str, torchvision: Any, timm: Any) -> Any:
    import torch

    torch.manual_seed(0)
    if library == "torchvision":
        return getattr(torchvision.models, builder)(weights=None, num_classes=NUM_CLASSES)
    return timm.create_model(builder, pretrained=False, num_classes=NUM_CLASSES)


def _inputs() -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(1)
    return (torch.randn(INPUT_SHAPE, generator=generator),
            torch.randn(INPUT_SHAPE[0], NUM_CLASSES, generator=generator))


def _step(model: Any, mode: str) -> dict[str, Any]:
    """One seeded forward+backward in ``mode``: output, gradients, buffers afterwards (detached copies)."""
    import torch

    x, cotangent = _inputs()
    model.train(mode == "train")
    model.zero_grad(set_to_none=True)
    x.requires_grad_(True)
    torch.manual_seed(2)  # dropout, stochastic depth
    output = model(x)
    output.backward(cotangent)
    result = {"output": output.detach().clone(), "input_grad": x.grad.clone()}
    result.update({f"param_grad {n}": p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    params = {n for n, _ in model.named_parameters()}
    result.update({f"buffer {n}": b.detach().clone() for n, b in model.state_dict(keep_vars=True).items()
                   if n not in params})
    return result


@contextmanager
def _executed_pairs(model: Any) -> Iterator[list[tuple[str, str]]]:
    """Collect (conv, bn) names of executed Conv->BN pairs (module docstring) while the body runs."""
    import torch
    from torch import nn

    pairs: list[tuple[str, str]] = []
    produced: dict[int, tuple[str, torch.Tensor, int]] = {}  # id -> (conv, the tensor kept alive, version)
    handles = []

    def conv_hook(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                produced[id(output)] = (name, output, output._version)
        return hook

    def bn_hook(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            entry = produced.get(id(args[0])) if args else None
            if entry is not None and entry[1] is args[0] and args[0]._version == entry[2]:
                pairs.append((entry[0], name))
        return hook

    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            handles.append(module.register_forward_hook(conv_hook(name)))
        elif isinstance(module, nn.BatchNorm2d):
            handles.append(module.register_forward_pre_hook(bn_hook(name)))
    try:
        yield pairs
    finally:
        for handle in handles:
            handle.remove()


def _features(model: Any, torchvision: Any) -> dict[str, Any]:
    """torchvision's fx feature extractor on ``model``: the features in train and in eval."""
    from torchvision.models.feature_extraction import create_feature_extractor

    extractor = create_feature_extractor(model, return_nodes=FEATURE_NODES)
    x, _ = _inputs()
    result = {}
    for mode in ("train", "eval"):
        extractor.train(mode == "train")
        for key, value in extractor(x).items():
            result[f"{mode} {key}"] = value.detach().clone()
    return result


def _class_files(model: Any) -> list[list[str]]:
    """[file relative to the vision directory, class name] of each module class of ``model`` defined there, and of
    their base classes (torchvision's Conv2dNormActivation builds its layers in _ConvNormActivation.__init__)."""
    found = set()
    for kind in {cls for module in model.modules() for cls in type(module).__mro__[:-1]}:  # not `object`
        source = Path(inspect.getsourcefile(kind) or "")
        if VISION_DIR in source.parents:
            found.add((source.relative_to(VISION_DIR).as_posix(), kind.__qualname__))
    return sorted([file, name] for file, name in found)


def _saved(directory: Path, index: int) -> Path:
    """Where the original run keeps the results of ``MODELS[index]``: one file per model, so that neither worker
    holds more than one model's float64 weights, gradients and outputs at a time (all of them: 2.3 GB)."""
    return directory / f"model{index}.pt"


def _original(out: Path) -> None:
    import torch
    from model_zoo import import_vision

    torchvision, timm = import_vision()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    out.mkdir()
    classes = {}
    for index, (name, library, builder) in enumerate(MODELS):
        model = _build(library, builder, torchvision, timm)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        train = _step(model, "train")
        with _executed_pairs(model) as pairs:
            evaluated = _step(model, "eval")
        saved = {"state_dict": state, "train": train, "eval": evaluated, "pairs": pairs}
        if builder == "resnet18":
            model.load_state_dict(state)
            saved["features"] = _features(model, torchvision)
        torch.save(saved, _saved(out, index))
        classes[name] = _class_files(model)
        del model, state, train, evaluated, saved  # before the next model is built
    (out / "classes.json").write_text(json.dumps(classes))


@contextmanager
def _kernel_calls() -> Iterator[tuple[list[tuple[Any, Any]], list[int]]]:
    """Record the (conv, bn) modules of every conv_bn2d call and count folded-branch calls, by wrapping."""
    import adopter_kernels
    from adopter_kernels import batch_norm

    calls: list[tuple[Any, Any]] = []
    folded: list[int] = []
    kernel, branch = batch_norm.conv_bn2d, batch_norm._conv_bn2d_folded

    def counting_kernel(input: Any, conv: Any, bn: Any) -> Any:
        calls.append((conv, bn))
        return kernel(input, conv, bn)

    def counting_branch(*args: Any) -> Any:
        folded.append(1)
        return branch(*args)

    batch_norm.conv_bn2d = adopter_kernels.conv_bn2d = counting_kernel  # type: ignore[assignment]
    batch_norm._conv_bn2d_folded = counting_branch  # type: ignore[assignment]
    try:
        yield calls, folded
    finally:
        batch_norm.conv_bn2d = adopter_kernels.conv_bn2d = kernel  # type: ignore[assignment]
        batch_norm._conv_bn2d_folded = branch  # type: ignore[assignment]


def _compare(report: Any, mode: str, expected: dict[str, Any], actual: dict[str, Any]) -> None:
    from adopter_kernels.equivalence import Mismatch, _compare_grad, _compare_tensor

    for key in sorted(expected.keys() ^ actual.keys()):
        report.mismatches.append(Mismatch("missing", mode, key, "only in one model"))
    grads = [v for k, v in expected.items() if "grad" in k]
    scale = max((float(g.abs().max()) for g in grads if g.numel()), default=0.0)
    for key in sorted(expected.keys() & actual.keys()):
        kind = key.split(" ")[0]
        if "grad" in key:
            _compare_grad(report, kind, mode, key, expected[key], actual[key], expected[key], scale)
        else:
            _compare_tensor(report, kind, mode, key, expected[key], actual[key])


def _rewritten(tree: Path, original: Path, out: Path) -> None:
    import adopter_kernels
    import torch
    from adopter_kernels.equivalence import EquivalenceReport
    from model_zoo import import_vision

    torchvision, timm = import_vision(tree)
    for module in (torchvision, timm):
        assert tree in Path(module.__file__).parents, f"{module.__name__} imported from {module.__file__}"
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    rows = {}
    for index, (name, library, builder) in enumerate(MODELS):
        saved = torch.load(_saved(original, index), weights_only=False)
        _saved(original, index).unlink()  # read once: the run leaves no gigabytes behind in the temporary directory
        model = _build(library, builder, torchvision, timm)
        model.load_state_dict(saved["state_dict"], strict=True)
        names = {id(module): module_name for module_name, module in model.named_modules()}
        report = EquivalenceReport(rtol=RTOL, atol=ATOL, modes=("train", "eval"))
        with adopter_kernels.use_backend(FOLDED):
            _compare(report, "train", saved["train"], _step(model, "train"))
            with _kernel_calls() as (calls, folded):
                _compare(report, "eval folded", saved["eval"], _step(model, "eval"))
        _compare(report, "eval auto", saved["eval"], _step(model, "eval"))
        if "features" in saved:
            model.load_state_dict(saved["state_dict"], strict=True)
            with adopter_kernels.use_backend(FOLDED):
                _compare(report, "fx features", saved["features"], _features(model, torchvision))
        executed = [tuple(pair) for pair in saved["pairs"]]
        called = [(names[id(conv)], names[id(bn)]) for conv, bn in calls]
        through = sum(1 for pair in called if pair in executed)
        rows[name] = {
            "executed_pairs": len(executed),
            "through_kernel": through,
            "folded": len(folded),
            "other_kernel_calls": len(called) - through,
            "missed": [f"{conv} -> {bn}" for conv, bn in executed if (conv, bn) not in called],
            "compared": report.compared,
            "max_abs_diff": max(report.max_abs_diff.values(), default=0.0),
            "mismatches": [str(m) for m in report.mismatches[:10]],
        }
        del saved, model, calls  # before the next model is loaded and built
    out.write_text(json.dumps(rows, indent=1))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("original").add_argument("out", type=Path)
    rewritten = commands.add_parser("rewritten")
    for argument in ("tree", "original", "out"):
        rewritten.add_argument(argument, type=Path)
    args = parser.parse_args(argv)
    if args.command == "original":
        _original(args.out)
    else:
        _rewritten(args.tree, args.original, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])

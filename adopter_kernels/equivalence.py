"""Execution harness: run an original and a rewritten model side by side and compare them.

Used by the test-suite (every positive fixture, the transformers corpus) and by ``gpu_bench``, and available to
anyone who wants to check their own rewritten model against the original. It needs torch only, so it lives in the
runtime distribution (``adopter-kernels``), not on the torch-free codemod path; ``import adopter_kernels`` does not
import it.

What "equivalent" means here (docs/DESIGN.md §4):

* the two ``state_dict()`` have the same keys and shapes, and the original one loads into the rewritten model
  with ``strict=True`` (checkpoint compatibility);
* in every requested mode (``eval`` and ``train``) both models, fed clones of the same inputs under the same RNG
  seed, return the same output tensors; backpropagating the same seeded random cotangent gives the same input
  gradients and the same gradient for every named parameter;
* after each forward/backward the persistent buffers (e.g. BatchNorm running statistics) are the same;
* and the comparison means something: an output of the original that is NaN or inf throughout is a mismatch (NaN
  compares equal to NaN, as eager's fully masked attention rows need), and an original that raises on the inputs
  raises :class:`OriginalModelError`.

Comparisons run in float64 (:func:`check_equivalent` builds both models and their inputs under
``torch.set_default_dtype(torch.float64)``): rounding noise is then about 1e-15, so the default tolerance of 1e-9
separates a real difference from rounding with a wide margin on both sides. A gradient is judged against the
largest gradient of the same backward pass (``atol + rtol * largest``): a gradient that is zero in exact
arithmetic (attention's key bias, a bias followed by a normalisation) holds only rounding noise of the
magnitude of the others. Everything that draws random numbers (the factory, the forward, the cotangents) runs
under a fixed seed, so a comparison gives the same result in any test order.

Typical use::

    original = load_source_as_module(src, "case_original")
    rewritten = load_source_as_module(rewrite_source(src).code, "case_rewritten")
    assert_equivalent(original, rewritten)            # calls make_example() in both
"""

from __future__ import annotations

import dataclasses
import linecache
import math
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

__all__ = [
    "EquivalenceReport",
    "Mismatch",
    "OriginalModelError",
    "assert_equivalent",
    "check_equivalent",
    "compare_models",
    "default_dtype",
    "iter_leaves",
    "load_source_as_module",
    "seeded",
]

MODES: tuple[str, ...] = ("eval", "train")

#: Default tolerances, meant for float64 models: far above float64 rounding (~1e-15), below float32's (~1e-7).
RTOL: float = 1e-9
ATOL: float = 1e-9


# --------------------------------------------------------------------------------------------------------------
# Determinism: default dtype and seeds
# --------------------------------------------------------------------------------------------------------------


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Run the body with ``torch.get_default_dtype() == dtype``; the previous default is restored afterwards.

    Models built inside (``nn.Linear``, ``torch.randn``, float literals in ``torch.tensor``) get ``dtype``, so the
    original and the rewritten model compute in the same, chosen precision.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the body with torch's RNGs seeded with ``seed``; the caller's RNG state is restored afterwards."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        yield


# --------------------------------------------------------------------------------------------------------------
# Loading source text as a module
# --------------------------------------------------------------------------------------------------------------


def load_source_as_module(
    source: str,
    name: str,
    *,
    package: str | None = None,
    path: str | None = None,
) -> types.ModuleType:
    """Execute ``source`` as a fresh module called ``name`` and return it.

    The module is put in ``sys.modules[name]`` before its body runs and stays there afterwards (it is removed
    again if executing the body fails): ``dataclasses`` resolves annotations through ``sys.modules`` and pickling
    finds classes by module name. ``package`` sets ``__package__`` so relative imports resolve, e.g. a rewritten
    ``modeling_bert.py`` loaded as ``transformers.models.bert.modeling_bert_adopted`` with package
    ``transformers.models.bert`` can still do ``from ...activations import ACT2FN``.

    ``path`` becomes ``__file__`` and the file name in tracebacks; the source text is registered in ``linecache``
    under that name, so tracebacks and ``inspect.getsource`` (used by ``torch.compile``) show the executed text
    even when it only exists in memory.
    """
    filename = path if path is not None else f"<{name}>"
    # dont_inherit: this file's `from __future__ import annotations` must not turn the module's annotations into
    # strings (transformers reads them: a string config_class breaks from_pretrained)
    code = compile(source, filename, "exec", dont_inherit=True)
    module = types.ModuleType(name)
    module.__file__ = filename
    if package is not None:
        module.__package__ = package
    # Register the executed text (not whatever is on disk at `path`): the rewritten source usually differs.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)

    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
        raise
    return module


# --------------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """One difference between the original and the rewritten model.

    ``kind`` is one of ``state_dict``, ``output``, ``input_grad``, ``param_grad``, ``buffer``, ``error``.
    ``mode`` is ``eval``/``train``, or ``""`` for checks that do not depend on the mode.
    """

    kind: str
    mode: str
    name: str
    detail: str
    max_abs_diff: float | None = None

    def __str__(self) -> str:
        where = f"[{self.mode}] " if self.mode else ""
        diff = f" (max abs diff {self.max_abs_diff:.3e})" if self.max_abs_diff is not None else ""
        return f"{where}{self.kind} {self.name}: {self.detail}{diff}"


class OriginalModelError(RuntimeError):
    """The original model itself failed on the inputs given: there is nothing to compare the rewrite with."""


@dataclasses.dataclass
class EquivalenceReport:
    """Outcome of one comparison; ``ok`` is true when no mismatch was found."""

    rtol: float
    atol: float
    modes: tuple[str, ...]
    mismatches: list[Mismatch] = dataclasses.field(default_factory=list)
    #: Number of tensors compared (outputs, gradients, buffers over all modes).
    compared: int = 0
    #: Largest absolute difference seen per mode, over every compared floating-point tensor.
    max_abs_diff: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __bool__(self) -> bool:
        return self.ok

    def format(self, limit: int = 20) -> str:
        """Human-readable summary: the first ``limit`` mismatches, one a line."""
        head = (
            f"{'equivalent' if self.ok else 'NOT equivalent'}: {self.compared} tensors compared in modes "
            f"{', '.join(self.modes) or '-'} (rtol={self.rtol:g}, atol={self.atol:g})"
        )
        lines = [head, *(f"  - {m}" for m in self.mismatches[:limit])]
        if len(self.mismatches) > limit:
            lines.append(f"  ... and {len(self.mismatches) - limit} more")
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        """Raise ``AssertionError`` with :meth:`format` as message if any mismatch was found."""
        if not self.ok:
            raise AssertionError(self.format())

    def _note(self, mode: str, diff: float) -> None:
        self.compared += 1
        if not math.isnan(diff):
            self.max_abs_diff[mode] = max(self.max_abs_diff.get(mode, 0.0), diff)


# --------------------------------------------------------------------------------------------------------------
# Walking nested outputs / inputs
# --------------------------------------------------------------------------------------------------------------


def iter_leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(path, leaf)`` for every non-None leaf of tuples/lists/dicts/dataclasses (ModelOutput is a dict)."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, Mapping):
        # ModelOutput is an OrderedDict holding only the non-None fields; treat every mapping alike.
        for key, item in value.items():
            yield from iter_leaves(item, f"{path}.{key}" if path else str(key))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from iter_leaves(getattr(value, field.name), f"{path}.{field.name}" if path else field.name)
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from iter_leaves(item, f"{path}[{index}]")
    elif value is not None:
        yield path, value


def _clone_inputs(value: Any) -> Any:
    """Deep-copy the tensors of an argument tree; floating-point ones become fresh leaves requiring grad."""
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        return copy.requires_grad_(True) if copy.is_floating_point() else copy
    if isinstance(value, Mapping):
        mapping: Any = type(value)  # a dict-like class built from its items
        return mapping((key, _clone_inputs(item)) for key, item in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(_clone_inputs(item) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_clone_inputs(item) for item in value)
    return value


# --------------------------------------------------------------------------------------------------------------
# Tensor comparison
# --------------------------------------------------------------------------------------------------------------


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| over positions where the values are not both the same inf / both NaN."""
    # (complex values keep their imaginary part: |a - b| is the modulus of the difference)
    wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
    a64, b64 = a.detach().to(wide), b.detach().to(wide)
    same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
    if bool(same.all()):
        return 0.0
    diff = (a64 - b64).abs().masked_fill(same, 0.0)
    return float(torch.nan_to_num(diff, nan=math.inf).max())


def _compare_tensor(
    report: EquivalenceReport,
    kind: str,
    mode: str,
    name: str,
    expected: torch.Tensor,
    actual: torch.Tensor,
    atol: float | None = None,
) -> None:
    """Compare ``actual`` (rewritten) with ``expected`` (original); record a mismatch if they differ.

    ``atol`` replaces the report's absolute tolerance (gradients pass one scaled by the largest gradient).
    """
    if expected.shape != actual.shape:
        report.mismatches.append(
            Mismatch(kind, mode, name, f"shape {tuple(actual.shape)} != original {tuple(expected.shape)}")
        )
        return
    if expected.dtype != actual.dtype:
        report.mismatches.append(Mismatch(kind, mode, name, f"dtype {actual.dtype} != original {expected.dtype}"))
        return
    if expected.device != actual.device:
        actual = actual.to(expected.device)
    if not (expected.is_floating_point() or expected.is_complex()):
        exact = torch.equal(expected, actual)
        report._note(mode, 0.0 if exact else math.nan)
        if not exact:
            report.mismatches.append(Mismatch(kind, mode, name, "integer/bool values differ"))
        return
    diff = _max_abs_diff(expected, actual)
    report._note(mode, diff)
    atol = report.atol if atol is None else atol
    close = torch.allclose(actual.detach(), expected.detach(), rtol=report.rtol, atol=atol, equal_nan=True)
    if not close:
        report.mismatches.append(
            Mismatch(kind, mode, name, f"values differ, shape {tuple(expected.shape)}", max_abs_diff=diff)
        )


def _compare_grad(
    report: EquivalenceReport,
    kind: str,
    mode: str,
    name: str,
    expected: torch.Tensor | None,
    actual: torch.Tensor | None,
    like: torch.Tensor,
    scale: float,
) -> None:
    """Compare two gradients; ``None`` (no gradient flowed) counts as zeros of ``like``'s shape.

    ``scale`` is the largest gradient of the original model's backward pass: a gradient that is zero in exact
    arithmetic carries rounding noise proportional to it, so the absolute tolerance is ``atol + rtol * scale``.
    """
    if expected is None and actual is None:
        return
    expected = torch.zeros_like(like) if expected is None else expected
    actual = torch.zeros_like(like) if actual is None else actual
    _compare_tensor(report, kind, mode, name, expected, actual, atol=report.atol + report.rtol * scale)


def _largest_gradient(tensors: Iterable[torch.Tensor]) -> float:
    """Largest finite |gradient| over ``tensors`` (0.0 when none has one)."""
    largest = 0.0
    for tensor in tensors:
        grad = tensor.grad
        if grad is not None and grad.is_floating_point() and grad.numel():
            finite = torch.nan_to_num(grad.detach().double().abs(), nan=0.0, posinf=0.0, neginf=0.0)
            largest = max(largest, float(finite.max()))
    return largest


# --------------------------------------------------------------------------------------------------------------
# Model comparison
# --------------------------------------------------------------------------------------------------------------


def _buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """Persistent buffers: the state-dict entries that are not parameters (non-persistent ones are caches)."""
    params = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    return {name: t for name, t in model.state_dict(keep_vars=True).items() if name not in params}


def _check_state_dicts(report: EquivalenceReport, original: nn.Module, rewritten: nn.Module) -> bool:
    """Same keys and shapes? Record mismatches and return False when the checkpoint would not load."""
    ours, theirs = original.state_dict(), rewritten.state_dict()
    for key in sorted(ours.keys() - theirs.keys()):
        report.mismatches.append(Mismatch("state_dict", "", key, "missing in the rewritten model"))
    for key in sorted(theirs.keys() - ours.keys()):
        report.mismatches.append(Mismatch("state_dict", "", key, "unexpected key in the rewritten model"))
    for key in sorted(ours.keys() & theirs.keys()):
        if ours[key].shape != theirs[key].shape:
            report.mismatches.append(
                Mismatch(
                    "state_dict",
                    "",
                    key,
                    f"shape {tuple(theirs[key].shape)} != original {tuple(ours[key].shape)}",
                )
            )
    return report.ok


def _run(
    model: nn.Module,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    seed: int,
    context: Callable[[], AbstractContextManager[Any]],
) -> tuple[Any, Any, list[tuple[str, Any]]]:
    """Forward + backward of one model under ``seed``; returns (cloned args, cloned kwargs, output leaves)."""
    model.zero_grad(set_to_none=True)
    call_args = _clone_inputs(tuple(args))
    call_kwargs = _clone_inputs(dict(kwargs))
    with seeded(seed):
        with context():
            outputs = model(*call_args, **call_kwargs)
        leaves = list(iter_leaves(outputs, "output"))
        differentiable = [t for _, t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
        if differentiable:
            generator = torch.Generator(device="cpu").manual_seed(seed)
            cotangents = [
                torch.randn(t.shape, generator=generator, dtype=torch.float32).to(device=t.device, dtype=t.dtype)
                for t in differentiable
            ]
            torch.autograd.backward(differentiable, cotangents)
    return call_args, call_kwargs, leaves


def compare_models(
    original_model: nn.Module,
    rewritten_model: nn.Module,
    args: Sequence[Any] | torch.Tensor = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
    seed: int = 0,
    modes: Iterable[str] = MODES,
    context: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> EquivalenceReport:
    """Compare two already-built models on one input (see the module docstring for what is checked).

    The original model's state is loaded into the rewritten one with ``strict=True`` and both are reset to that
    state before every mode, so modes are independent. Both models are left in the last mode run, with gradients
    of the last backward. ``context`` wraps each forward (e.g. ``lambda: torch.autocast("cuda", torch.bfloat16)``).
    The default tolerances are meant for float64 models (build and run them under ``default_dtype(torch.float64)``);
    a lower precision needs tolerances of its own.
    """
    modes = tuple(modes)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; expected a subset of {MODES}")
    if isinstance(args, torch.Tensor):
        args = (args,)
    kwargs = dict(kwargs or {})
    report = EquivalenceReport(rtol=rtol, atol=atol, modes=modes)
    if not _check_state_dicts(report, original_model, rewritten_model):
        return report

    state = original_model.state_dict()
    snapshot = OrderedDict((k, v.detach().clone()) for k, v in state.items())
    # the versions a module's _load_from_state_dict reads (torchvision's MNASNet raises without them)
    snapshot._metadata = getattr(state, "_metadata", None)  # type: ignore[attr-defined]
    for mode in modes:
        try:
            original_model.load_state_dict(snapshot, strict=True)
            rewritten_model.load_state_dict(snapshot, strict=True)
        except RuntimeError as exc:  # e.g. a custom _load_from_state_dict in the rewritten model refuses it
            report.mismatches.append(Mismatch("state_dict", "", "load_state_dict(strict=True)", str(exc)))
            return report
        training = mode == "train"
        original_model.train(training)
        rewritten_model.train(training)

        try:
            ref_args, ref_kwargs, ref_leaves = _run(original_model, args, kwargs, seed, context)
        except Exception as exc:  # nothing to compare against: the inputs (or the original) are at fault
            raise OriginalModelError(
                f"the original model raised in {mode} mode ({type(exc).__name__}: {exc}); the comparison needs inputs "
                "it runs on"
            ) from exc
        try:
            new_args, new_kwargs, new_leaves = _run(rewritten_model, args, kwargs, seed, context)
        except Exception as exc:  # the rewritten model must accept whatever the original accepts
            report.mismatches.append(Mismatch("error", mode, "forward/backward", f"{type(exc).__name__}: {exc}"))
            continue

        _compare_outputs(report, mode, ref_leaves, new_leaves)
        ref_inputs = [
            t
            for _, t in [*iter_leaves(ref_args, "args"), *iter_leaves(ref_kwargs, "kwargs")]
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        scale = _largest_gradient([*ref_inputs, *original_model.parameters()])
        for (name, ref_in), (_, new_in) in zip(
            [*iter_leaves(ref_args, "args"), *iter_leaves(ref_kwargs, "kwargs")],
            [*iter_leaves(new_args, "args"), *iter_leaves(new_kwargs, "kwargs")],
        ):
            if isinstance(ref_in, torch.Tensor) and ref_in.requires_grad:
                _compare_grad(report, "input_grad", mode, name, ref_in.grad, new_in.grad, ref_in, scale)

        new_params = dict(rewritten_model.named_parameters())
        for name, param in original_model.named_parameters():
            other = new_params.get(name)
            if other is None:  # a tied/shared parameter registered under another name in the rewritten model
                report.mismatches.append(Mismatch("param_grad", mode, name, "no such parameter in rewritten model"))
            elif param.requires_grad:
                _compare_grad(report, "param_grad", mode, name, param.grad, other.grad, param, scale)

        new_buffers = _buffers(rewritten_model)
        for name, buf in _buffers(original_model).items():
            if name in new_buffers:
                _compare_tensor(report, "buffer", mode, name, buf, new_buffers[name])
            else:  # same state-dict key, but a parameter in the rewritten model
                report.mismatches.append(Mismatch("buffer", mode, name, "is not a buffer in the rewritten model"))
    return report


def _compare_outputs(
    report: EquivalenceReport,
    mode: str,
    expected: list[tuple[str, Any]],
    actual: list[tuple[str, Any]],
) -> None:
    """Compare output leaves by path; structure differences (missing/extra outputs) are mismatches too."""
    theirs = dict(actual)
    for path, value in expected:
        if path not in theirs:
            report.mismatches.append(Mismatch("output", mode, path, "missing in the rewritten model's output"))
            continue
        other = theirs.pop(path)
        if isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor):
            _compare_tensor(report, "output", mode, path, value, other)
            if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).any()):
                # NaN equals NaN here (eager's fully masked rows), so an all-NaN output would compare equal to anything
                report.mismatches.append(Mismatch(
                    "output", mode, path, "every value of the original's output is NaN or inf: the comparison "
                    "proves nothing (uninitialised weights, such as a torch.empty parameter?)",
                ))
            if value.requires_grad != other.requires_grad:
                report.mismatches.append(
                    Mismatch("output", mode, path, f"requires_grad {other.requires_grad} != {value.requires_grad}")
                )
        elif isinstance(value, torch.Tensor) or isinstance(other, torch.Tensor) or value != other:
            report.mismatches.append(Mismatch("output", mode, path, f"{other!r} != original {value!r}"))
    for path in theirs:
        report.mismatches.append(Mismatch("output", mode, path, "extra output in the rewritten model"))


def _call_factory(module: types.ModuleType, factory: str, seed: int) -> tuple[nn.Module, tuple[Any, ...], dict]:
    """Call ``module.<factory>()`` under ``seed`` and normalise its result to (model, args, kwargs)."""
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise AttributeError(f"module {module.__name__!r} defines no callable {factory}()")
    with seeded(seed):
        result = fn()
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise TypeError(f"{module.__name__}.{factory}() must return (model, args) or (model, args, kwargs)")
    model, args, *rest = result
    if not isinstance(model, nn.Module):
        raise TypeError(f"{module.__name__}.{factory}() returned {type(model).__name__}, not an nn.Module")
    args = (args,) if isinstance(args, torch.Tensor) else tuple(args)
    return model, args, dict(rest[0]) if rest else {}


def check_equivalent(
    original: types.ModuleType,
    rewritten: types.ModuleType,
    factory: str = "make_example",
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
    seed: int = 0,
    modes: Iterable[str] = MODES,
    dtype: torch.dtype = torch.float64,
) -> EquivalenceReport:
    """Build a model with ``factory()`` in each module (same seed) and compare them with :func:`compare_models`.

    Building and running happen under ``default_dtype(dtype)``: float64 by default, which the default
    tolerances assume. The inputs come from the original module's factory; the rewritten factory's inputs are
    ignored except that calling it must succeed.
    """
    with default_dtype(dtype):
        original_model, args, kwargs = _call_factory(original, factory, seed)
        rewritten_model, _, _ = _call_factory(rewritten, factory, seed)
        return compare_models(
            original_model, rewritten_model, args, kwargs, rtol=rtol, atol=atol, seed=seed, modes=modes
        )


def assert_equivalent(
    original: types.ModuleType,
    rewritten: types.ModuleType,
    factory: str = "make_example",
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
    seed: int = 0,
    modes: Iterable[str] = MODES,
    dtype: torch.dtype = torch.float64,
) -> EquivalenceReport:
    """Like :func:`check_equivalent` but raise ``AssertionError`` naming every differing tensor."""
    report = check_equivalent(
        original, rewritten, factory, rtol=rtol, atol=atol, seed=seed, modes=modes, dtype=dtype
    )
    report.raise_if_failed()
    return report

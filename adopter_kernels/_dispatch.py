"""Backend selection for adopter_kernels: which implementation of a kernel runs for a given call.

Every kernel has a pure-PyTorch *reference* backend: exactly the computation the codemods replaced (the oracle in
tests). Some kernels have faster backends (own Triton kernels, SDPA, folded weights, a packed GEMM, xformers).
Each kernel module registers its backends here with ``register_kernel``, in order of preference; a backend says

* ``available()``: whether it can run at all in this process (``None``, or why not: "triton is not installed");
* ``supports(call)``: whether it computes the same result for this call (dtype, device, autocast, mode). A forced
  backend that does not support a call still falls back to the reference path, so forcing never changes results;
* ``faster(call)``: where ``auto`` picks it: where it was *measured* faster than the original, on CPU and on CUDA
  (an H200; benchmarks/bench_kernels.py and gpu_bench, figures in docs/KERNEL_PERFORMANCE.md). Where it measured
  slower or no faster, ``auto`` runs the original computation: a rewrite must not make a model slower. xformers is
  timed against SDPA on the first call of each kind instead (``attention_backends``).

``ADOPTER_KERNELS_BACKEND`` (read on every call, so changing it at run time takes effect) is a comma-separated
list: a bare name sets every kernel that has a backend of that name (``auto``, ``reference``, ``triton``, ...),
``kernel=name`` sets one kernel and wins over a bare name, e.g. ``ADOPTER_KERNELS_BACKEND=reference`` or
``ADOPTER_KERNELS_BACKEND=auto,packed_qkv_linear=reference,bert_self_attention=xformers``. A kernel that lacks a
forced bare name keeps ``auto``. Forcing an unavailable backend raises. ``triton`` forced on CPU tensors needs
``TRITON_INTERPRET=1`` (how the Triton kernels are unit-tested without a GPU). ``use_backend(spec)`` overrides
the variable inside a ``with`` block (tests, benchmarks). ``backends()`` reports all of it.

Adding a kernel: define its backends (reuse ``REFERENCE``/``TRITON``), call ``register_kernel`` at import time of
its module, and branch on ``select(name, *tensors)`` in the op, after ``reference_only(name)`` where the kernel has
checks to make before the decision: where the original computation runs, a rewritten model must cost next to nothing
more than the original (``benchmarks/bench_host_overhead.py``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterator, List, Optional, Tuple, Type

import torch
from torch import nn

__all__ = [
    "BACKEND_ENV",
    "BACKENDS",
    "Backend",
    "Call",
    "autocast_dtype",
    "compute_dtype",
    "REFERENCE",
    "TRITON",
    "backends",
    "current_backend",
    "reference_only",
    "register_kernel",
    "select",
    "use_backend",
    "triton_available",
    "is_plain",
    "parametrized",
    "unobserved",
    "fx_tracing",
]

BACKEND_ENV = "ADOPTER_KERNELS_BACKEND"
#: Names every kernel understands; kernels add their own (``sdpa``, ``xformers``, ``packed``, ``folded``).
BACKENDS = ("auto", "reference", "triton")


@dataclass(frozen=True)
class Call:
    """What backend selection may look at: cheap facts of the call, no tensor data."""

    device: str  # "cpu", "cuda", ... (the device of the first tensor)
    dtype: Optional[torch.dtype]  # of the first floating-point tensor
    grad: bool  # autograd records this call (a training step): grad mode on and some tensor requires grad
    autocast: Optional[torch.dtype]  # the dtype autocast computes in on the device; None when autocast is off

    @property
    def compute(self) -> Optional[torch.dtype]:
        """The dtype the call's matmuls compute in (``compute_dtype``)."""
        return compute_dtype(self.dtype, self.autocast)


def compute_dtype(dtype: Optional[torch.dtype], autocast: Optional[torch.dtype]) -> Optional[torch.dtype]:
    """What a matmul on ``dtype`` tensors computes in: autocast's dtype (``autocast``; None when off) for the
    floating dtypes autocast casts (float64 it leaves alone), else ``dtype``."""
    if autocast is not None and dtype in (torch.float32, torch.float16, torch.bfloat16):
        return autocast
    return dtype


def _always(call: Call) -> bool:
    return True


def _never(call: Call) -> bool:
    return False


def _ready() -> Optional[str]:
    return None


@dataclass(frozen=True)
class Backend:
    """One implementation of a kernel; see the module docstring for the three predicates."""

    name: str
    #: Where ``auto`` picks it and the measurement behind that (shown by ``backends()``).
    where: str
    available: Callable[[], Optional[str]] = _ready
    supports: Callable[[Call], bool] = _always
    faster: Callable[[Call], bool] = _never


@dataclass
class _Kernel:
    name: str
    backends: Tuple[Backend, ...]
    doc: str = ""
    names: Tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.names = tuple(b.name for b in self.backends)


REFERENCE = Backend("reference", "the original computation; auto's choice wherever no other backend is faster")

_KERNELS: Dict[str, _Kernel] = {}
_override: Optional[str] = None


def register_kernel(name: str, *backends: Backend, doc: str = "") -> None:
    """Declare a kernel's backends in order of preference; ``REFERENCE`` is appended when missing."""
    if not any(b.name == "reference" for b in backends):
        backends = (*backends, REFERENCE)
    _KERNELS[name] = _Kernel(name, tuple(backends), doc)
    clear_decisions()


def _known_names() -> Tuple[str, ...]:
    names = dict.fromkeys(BACKENDS)
    for kernel in _KERNELS.values():
        names.update(dict.fromkeys(kernel.names))
    return tuple(names)


@functools.lru_cache(maxsize=64)
def _parse(spec: str) -> Tuple[str, Tuple[Tuple[str, str], ...]]:
    """``"auto,softmax=reference"`` -> ``("auto", (("softmax", "reference"),))``; raises ValueError on bad names."""
    default, per_kernel = "auto", []
    for item in (part.strip().lower() for part in spec.split(",")):
        if not item:
            continue
        kernel, eq, name = item.partition("=")
        if eq:
            kernel, name = kernel.strip(), name.strip()
            if kernel not in _KERNELS:
                raise ValueError(f"{BACKEND_ENV}: unknown kernel {kernel!r}; kernels: {', '.join(sorted(_KERNELS))}")
            if name != "auto" and name not in _KERNELS[kernel].names:
                raise ValueError(f"{BACKEND_ENV}: {kernel} has no backend {name!r}; "
                                 f"it has {', '.join(('auto', *_KERNELS[kernel].names))}")
            per_kernel.append((kernel, name))
        elif item in _known_names():
            default = item
        else:
            raise ValueError(f"{BACKEND_ENV} must be one of {_known_names()} or kernel=backend items, got {item!r}")
    return default, tuple(per_kernel)


def _environment_reader() -> Callable[[], str]:
    """A function returning ``os.environ.get(BACKEND_ENV, "")``, read on every call but cheaply.

    ``os.environ.get`` encodes the key on each call, a third of the dispatch's cost (0.7 of 2.2 us on CPU), paid by
    every kernel call of a rewritten model. CPython's ``os.environ`` keeps the encoded items in ``_data`` (updated by
    ``os.environ[...] = ...``, ``monkeypatch.setenv`` and ``del``), so the key is encoded once here; where that
    layout is missing, the plain lookup is used.
    """
    environ = os.environ
    data, encodekey, decodevalue = (getattr(environ, name, None) for name in ("_data", "encodekey", "decodevalue"))
    if not (isinstance(data, dict) and callable(encodekey) and callable(decodevalue)):
        return lambda: environ.get(BACKEND_ENV, "")
    key = encodekey(BACKEND_ENV)

    def read() -> str:
        raw = data.get(key)
        return "" if raw is None else decodevalue(raw)

    return read


_read_environment = _environment_reader()


def _spec() -> str:
    return _override if _override is not None else _read_environment()


def current_backend() -> str:
    """The bare backend name in force (``use_backend`` override, else the environment variable, else ``auto``)."""
    return _parse(_spec())[0]


def forced(kernel: str, spec: Optional[str] = None) -> str:
    """The backend requested for ``kernel`` (``auto`` unless the variable or ``use_backend`` names one)."""
    default, per_kernel = _parse(_spec() if spec is None else spec)
    for name, backend in reversed(per_kernel):
        if name == kernel:
            return backend
    return default if default in _KERNELS[kernel].names else "auto"


# A constant under torch.compile, as ``_decision`` is (the size tests of the attention subclasses ask it while
# compiling; traced, its cached parser would make dynamo warn).
forced._dynamo_marked_constant = True  # type: ignore[attr-defined]


@contextlib.contextmanager
def use_backend(spec: str) -> Iterator[None]:
    """Use ``spec`` (same syntax as ``ADOPTER_KERNELS_BACKEND``) for the duration of the ``with`` block."""
    global _override
    _parse(spec)  # validate before entering
    previous, _override = _override, spec
    clear_decisions()
    try:
        yield
    finally:
        _override = previous
        clear_decisions()


@functools.cache
def triton_available() -> bool:
    """True when ``import triton`` works (cached; triton is imported only when first asked)."""
    try:
        importlib.import_module("triton")
    except Exception:  # ImportError, or a broken install that fails while initialising
        return False
    return True


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 only has the CUDA flag
        return device_type == "cuda" and torch.is_autocast_enabled()


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype autocast computes in on ``device_type``; None when autocast is off there."""
    if not _autocast_on(device_type):
        return None
    try:
        return torch.get_autocast_dtype(device_type)
    except AttributeError:  # torch < 2.4
        return torch.get_autocast_cpu_dtype() if device_type == "cpu" else torch.get_autocast_gpu_dtype()


def _device_type(tensor: torch.Tensor) -> str:
    # ``is_cuda``/``is_cpu`` are plain flags; ``tensor.device`` builds a device object (a measurable cost per call).
    return "cuda" if tensor.is_cuda else "cpu" if tensor.is_cpu else tensor.device.type


def records_grad(*tensors: Optional[torch.Tensor]) -> bool:
    """Whether autograd records a call on these tensors: grad mode on and some tensor requires grad (``Call.grad``)."""
    if not torch.is_grad_enabled():
        return False
    for tensor in tensors:  # a loop, not any(<generator>): half the cost, on every kernel call
        if tensor is not None and tensor.requires_grad:
            return True
    return False


_fx = torch.fx._symbolic_trace  # no public spelling of the check yet
#: True inside ``torch.fx.symbolic_trace`` only (torch >= 2.6; older torch has the broader is_fx_tracing).
fx_tracing: Callable[[], bool] = getattr(_fx, "is_fx_symbolic_tracing", None) or _fx.is_fx_tracing

# Decisions per (kernel, spec, device, dtype, grad, autocast): the dispatch runs on every kernel call and must
# cost next to nothing where it ends up running the original computation.
_DECISIONS: Dict[Tuple[object, ...], str] = {}


def clear_decisions() -> None:
    """Forget cached decisions (done by ``use_backend`` and ``register_kernel``; tests that patch availability)."""
    _DECISIONS.clear()
    _reference_only.cache_clear()


def reference_only(*kernels: str) -> bool:
    """True when every call of each of ``kernels`` runs the original computation under the backend setting in force:
    forced to ``reference``, or left to ``auto`` with no other backend faster anywhere (ADP004-ADP008, ADP012 and
    ADP013 by default). Kernels ask this before anything else, so that where the original runs a call costs next to
    nothing over the original code: that cost is a model's whole slowdown where the host, not the GPU, sets the
    pace (small batches, bfloat16 inference)."""
    only = _reference_only(_spec())
    for kernel in kernels:
        if kernel not in only:
            return False
    return True


@functools.lru_cache(maxsize=64)
def _reference_only(spec: str) -> FrozenSet[str]:
    return frozenset(
        name
        for name, kernel in _KERNELS.items()
        if (wanted := forced(name, spec)) == "reference"
        or (wanted == "auto" and all(backend.faster is _never for backend in kernel.backends))
    )


# A constant under torch.compile, as ``_decision`` (below) is.
reference_only._dynamo_marked_constant = True  # type: ignore[attr-defined]


def select(kernel: str, *tensors: Optional[torch.Tensor], training: Optional[bool] = None) -> str:
    """Name of the backend that runs ``kernel`` for a call on ``tensors`` (see the module docstring)."""
    if fx_tracing():
        # torch.fx records the original computation of kernels it traces into (the attention subclasses); the
        # functional kernels are fx leaf functions and never get here while tracing.
        return "reference"
    first = tensors[0]
    assert first is not None, "the first tensor decides device and dtype"
    device = _device_type(first)
    grad = training if training is not None else records_grad(*tensors)
    return _decision(kernel, _spec(), device, first.dtype, grad, autocast_dtype(device))


def _decision(kernel: str, spec: str, device: str, dtype: torch.dtype, grad: bool,
              autocast: Optional[torch.dtype]) -> str:
    key = (kernel, spec, device, dtype, grad, autocast)
    decision = _DECISIONS.get(key)
    if decision is None:
        decision = _DECISIONS[key] = _decide(_KERNELS[kernel], spec, Call(device, dtype, grad, autocast))
    return decision


# Under torch.compile the decision is taken once, while compiling (its arguments are constants there), and the
# compiled graph contains only the chosen computation: no graph break for the imports/caches behind it. This is
# what ``torch.compiler.assume_constant_result`` sets; calling that would import torch._dynamo (and triton with
# it) whenever adopter_kernels is imported.
_decision._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _decide(entry: _Kernel, spec: str, call: Call) -> str:
    wanted = forced(entry.name, spec)
    if wanted != "auto":
        backend = entry.backends[entry.names.index(wanted)]
        reason = backend.available()
        if reason is not None:
            raise RuntimeError(f"{BACKEND_ENV} forces {entry.name}={wanted}, but {reason}")
        return wanted if backend.supports(call) else "reference"
    return _select_for(entry, call)


#: (tensor dtype, autocast dtype or None) pairs whose choice ``backends()`` reports.
_REPORTED_PRECISIONS = ((torch.float32, None), (torch.bfloat16, None), (torch.float16, None),
                        (torch.float32, torch.bfloat16), (torch.float32, torch.float16))


def backends() -> Dict[str, Dict[str, object]]:
    """Per kernel: each backend (available or why not, where auto picks it), what is forced, and what a plain
    float32 / bfloat16 / float16 training and inference call, and a float32 one under bfloat16 or float16 autocast
    (``"cpu float32 bfloat16-autocast train"``), picks on CPU and on CUDA right now (before a kernel's size test,
    which ``auto_picks_it`` describes)."""
    report: Dict[str, Dict[str, object]] = {}
    for name, kernel in sorted(_KERNELS.items()):
        try:
            wanted = forced(name)
        except ValueError as exc:  # a bad environment variable: show it instead of failing the report
            wanted = f"invalid: {exc}"
        rows: List[Dict[str, object]] = []
        for backend in kernel.backends:
            reason = backend.available()
            rows.append({"name": backend.name, "available": reason is None, "why_not": reason,
                         "auto_picks_it": backend.where})
        selected: Dict[str, str] = {}
        for device in ("cpu", "cuda"):
            for dtype, autocast in _REPORTED_PRECISIONS:
                precision = str(dtype)[6:] + (f" {str(autocast)[6:]}-autocast" if autocast else "")
                for grad in (False, True):
                    call = Call(device, dtype, grad, autocast)
                    selected[f"{device} {precision} {'train' if grad else 'infer'}"] = _select_for(kernel, call)
        report[name] = {"doc": kernel.doc, "forced": wanted, "backends": rows, "auto_selects": selected}
    return report


def _select_for(kernel: _Kernel, call: Call) -> str:
    for backend in kernel.backends:
        if backend.name == "reference":
            break
        # Cheap predicates first: on CPU, triton and xformers are never imported.
        if backend.faster(call) and backend.supports(call) and backend.available() is None:
            return backend.name
    return "reference"


def _triton_reason() -> Optional[str]:
    return None if triton_available() else "triton is not installed (pip install triton; Linux only)"


def _triton_supports(call: Call) -> bool:
    # Autocast decides per op which dtype torch computes in (softmax and layer_norm run in float32); the
    # reference path reproduces that exactly, the Triton kernels would compute in the input dtype.
    return not call.autocast


#: Where auto picks none of the Triton kernels: a kernel whose Triton path measured faster somewhere registers a
#: copy with its own ``faster`` and ``where`` (``dataclasses.replace``, as ``rms_norm`` does).
TRITON = Backend(
    "triton",
    "nowhere: on an H200 it measured slower than the original (docs/KERNEL_PERFORMANCE.md), and on CPU Triton can "
    "only interpret; ADOPTER_KERNELS_BACKEND=triton (or <kernel>=triton) forces it",
    available=_triton_reason,
    supports=_triton_supports,
)


def unobserved(module: nn.Module) -> bool:
    """True when no forward or backward hook or pre-hook (the module's own or a global one) would see a call of
    ``module``."""
    from torch.nn.modules import module as _module  # global hook registries live here

    return not (
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks  # full backward hooks wrap the call's inputs and outputs
        or getattr(module, "_backward_pre_hooks", None)  # torch >= 2.0
        or _module._global_forward_hooks
        or _module._global_forward_pre_hooks
        or _module._global_backward_hooks
        or getattr(_module, "_global_backward_pre_hooks", None)
    )


def parametrized(*modules: nn.Module) -> bool:
    """True when a tensor of one of ``modules`` is computed on every read (``torch.nn.utils.parametrize``:
    ``weight_norm``, ``orthogonal``, ``spectral_norm``, whose read in training also runs a power iteration that
    updates its buffers). A kernel must then not read the module's weight itself: it calls the modules, which read
    it as often as the original code does."""
    return any("parametrizations" in getattr(m, "_modules", ()) for m in modules)


def is_plain(module: nn.Module, cls: Type[nn.Module], *methods: str) -> bool:
    """True when ``module`` computes exactly ``cls.forward`` and nothing observes the call.

    A fast path calls functional ops on the module's parameters instead of ``module(x)``; that is only
    equivalent when the forward is not overridden (LoRA/quantised subclasses), neither is the call machinery,
    nor any of ``methods`` (helpers the forward calls, e.g. ``Conv2d._conv_forward``), no hooks would be
    skipped, and no parameter is computed when read (:func:`parametrized`).
    """
    kind = type(module)
    return (
        isinstance(module, cls)
        and not parametrized(module)
        and kind.forward is cls.forward
        and kind.__call__ is nn.Module.__call__
        and kind._call_impl is nn.Module._call_impl
        and all(getattr(kind, name) is getattr(cls, name) for name in methods)
        and unobserved(module)
    )

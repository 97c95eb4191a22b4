"""Timing and peak-memory measurement of one callable (a training step or an inference call).

GPU: CUDA events around every timed call (device time, no host sync between calls) and
``torch.cuda.max_memory_allocated`` over warm-up and timed calls. CPU: ``time.perf_counter`` and the peak
resident set size, read from ``/proc/self/status`` (VmHWM) after resetting it through ``/proc/self/clear_refs``
(Linux); where that is unavailable, ``resource.getrusage`` ``ru_maxrss``, which cannot be reset, so its delta
only shows growth beyond the process's earlier peak.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclasses.dataclass
class Timing:
    """Per-call times (seconds) of the timed calls, their summary, and the memory peak."""

    times_s: list[float]
    batch_size: int
    #: Wall time of the first (warm-up) call: includes compilation for ``torch.compile`` and first allocations.
    first_call_s: float
    #: CUDA: peak bytes allocated by tensors (absolute, includes weights). CPU: peak RSS growth in bytes over the
    #: RSS at the start of the measurement. ``None`` when it cannot be measured.
    peak_mem_bytes: int | None
    memory_method: str
    #: 1-minute load average before and after the measurement (``os.getloadavg``; None where unsupported): on a
    #: shared machine it says how busy the CPUs were while this figure was taken.
    load: tuple[float, float] | None = None

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.median_s

    def summary(self) -> dict[str, float | int | str | list[float] | None]:
        """JSON-ready figures: median, quartiles, min/max, relative spread (IQR / median), throughput."""
        times = sorted(self.times_s)
        q1, _, q3 = statistics.quantiles(times, n=4) if len(times) > 1 else (times[0],) * 3
        return {
            "median_s": self.median_s,
            "q1_s": q1,
            "q3_s": q3,
            "min_s": times[0],
            "max_s": times[-1],
            "iqr_rel": (q3 - q1) / self.median_s,
            "repeats": len(times),
            "samples_per_s": self.samples_per_s,
            "first_call_s": self.first_call_s,
            "peak_mem_bytes": self.peak_mem_bytes,
            "memory_method": self.memory_method,
            "load_1min_before_after": list(self.load) if self.load else None,
            "times_s": self.times_s,
        }


def _proc_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class PeakMemory:
    """Context manager measuring the memory peak of the enclosed code on ``device`` (see module docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak_bytes: int | None = None
        self.method = ""
        self._baseline = 0

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.method = "torch.cuda.max_memory_allocated (absolute)"
        elif self._reset_hwm():
            self._baseline = _proc_kib("VmRSS")
            self.method = "peak RSS growth (VmHWM after /proc/self/clear_refs reset)"
        else:
            import resource

            self._baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            self.method = "ru_maxrss growth (not resettable: lower bound)"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device)
        elif self.method.startswith("peak RSS"):
            self.peak_bytes = max(0, _proc_kib("VmHWM") - self._baseline) * 1024
        else:
            import resource

            # ru_maxrss is KiB on Linux, bytes on macOS.
            unit = 1 if sys.platform == "darwin" else 1024
            self.peak_bytes = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - self._baseline) * unit

    @staticmethod
    def _reset_hwm() -> bool:
        try:
            _CLEAR_REFS.write_text("5")  # "5" resets the peak RSS (VmHWM) of this process, Linux >= 4.0
            _proc_kib("VmHWM")
        except (OSError, KeyError):
            return False
        return True


def measure(
    fn: Callable[[], object],
    *,
    device: torch.device,
    batch_size: int,
    warmup: int,
    repeats: int,
) -> Timing:
    """Call ``fn`` ``warmup`` times untimed (at least once), then ``repeats`` times timed, one sample per call."""
    if warmup < 1 or repeats < 1:
        raise ValueError("warmup and repeats must be at least 1 (the first call compiles and allocates)")
    cuda = device.type == "cuda"
    load_before = _load()
    with PeakMemory(device) as memory:
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        first_call_s = time.perf_counter() - start
        for _ in range(warmup - 1):
            fn()
        if cuda:
            torch.cuda.synchronize(device)
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)
            ]
            for begin, end in events:
                begin.record()
                fn()
                end.record()
            torch.cuda.synchronize(device)
            times = [begin.elapsed_time(end) / 1000.0 for begin, end in events]
        else:
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
    load_after = _load()
    load = (load_before, load_after) if load_before is not None and load_after is not None else None
    return Timing(times, batch_size, first_call_s, memory.peak_bytes, memory.method, load)


def measure_paired(
    fns: tuple[Callable[[], object], Callable[[], object]],
    *,
    device: torch.device,
    batch_size: int,
    warmup: int,
    repeats: int,
) -> tuple[Timing, Timing]:
    """Time two callables call by call in alternation: round ``i`` runs ``a, b`` when ``i`` is even, ``b, a`` when
    odd, so a change in machine load between rounds hits both equally and the ``i``-th times of ``a`` and ``b`` form
    a pair (their ratio is what ``paired_speedup`` summarises). Peak memory is not measured here: the two models
    share the process, so neither peak could be told apart; ``measure`` gives it."""
    if warmup < 1 or repeats < 1:
        raise ValueError("warmup and repeats must be at least 1 (the first call compiles and allocates)")
    cuda = device.type == "cuda"
    load_before = _load()
    first: list[float] = []
    for fn in fns:
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        first.append(time.perf_counter() - start)
        for _ in range(warmup - 1):
            fn()
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(repeats):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            if cuda:
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            fns[which]()
            if cuda:
                torch.cuda.synchronize(device)
            times[which].append(time.perf_counter() - start)
    load_after = _load()
    load = (load_before, load_after) if load_before is not None and load_after is not None else None
    return (
        Timing(times[0], batch_size, first[0], None, "not measured (interleaved timing)", load),
        Timing(times[1], batch_size, first[1], None, "not measured (interleaved timing)", load),
    )


def paired_speedup(reference: Timing, candidate: Timing) -> dict[str, float | bool]:
    """Per-round speedups ``reference / candidate`` of a ``measure_paired`` run: median and quartiles. The
    difference counts as measured (``beyond_noise``) when the interquartile range of the ratios excludes 1."""
    ratios = sorted(r / c for r, c in zip(reference.times_s, candidate.times_s))
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return {"median": statistics.median(ratios), "q1": q1, "q3": q3, "beyond_noise": q1 > 1.0 or q3 < 1.0}


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return None

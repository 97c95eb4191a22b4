"""Scan speed: the engine with all rules over a large real corpus, against a bare ``libcst.parse_module`` of the same
files measured in the same run. A script, not a test (docs/DESIGN.md §7):

    python benchmarks/bench_scan.py                 # one core, then -j 2
    python benchmarks/bench_scan.py -j 1 --profile  # where the analysis time goes (cProfile)

Corpus: every PyTorch ``models/*/modeling_*.py`` of the installed transformers (4.34.1: 206 files, 13.5 MB), or
the files/directories given. "Analysis" is what ``scan`` does besides parsing: screen the bytes for input that
would crash LibCST's parser, build the model structure, match every rule, compute the findings' positions. Goal (docs/PERFORMANCE.md): ratio = (parse + analysis) / parse
<= 1.5 on one core. Each file's parse and analysis are timed as the best of ``--repeat`` runs, which keeps the
ratio stable on a busy machine. Files that fail to parse or make the engine raise are listed: an exception in
the engine on real code is a bug.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import pstats
import resource
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
from adopter_codemods.engine import analyse  # noqa: E402
from adopter_codemods.files import SourceError, ensure_parser_survives  # noqa: E402
from adopter_codemods.rules import select_rules  # noqa: E402


def default_corpus() -> list[Path]:
    import transformers

    models = Path(transformers.__file__).parent / "models"
    return [
        p
        for p in sorted(models.glob("*/modeling_*.py"))
        if not p.name.startswith(("modeling_tf_", "modeling_flax_"))
    ]


def expand(paths: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return out


@dataclass
class FileResult:
    path: str
    size: int
    parse_s: float = 0.0
    analysis_s: float = 0.0
    findings: int = 0
    error: Optional[str] = None  # "parse: ..." or "engine: ..." (with the traceback's last line)


@dataclass
class Totals:
    files: list[FileResult] = field(default_factory=list)

    def add(self, results: list[FileResult]) -> None:
        self.files.extend(results)

    @property
    def ok(self) -> list[FileResult]:
        return [f for f in self.files if f.error is None]


_RULES: list = []  # per process: the selected rules, loaded once


def _init(rule_keys: Optional[list[str]]) -> None:
    _RULES[:] = select_rules(rule_keys)


def scan_file(path: Path, repeat: int) -> FileResult:
    data = path.read_bytes()
    result = FileResult(str(path), len(data))
    best_parse = best_analysis = float("inf")
    for _ in range(repeat):
        # The two steps of the engine's parse (files.parse), timed apart: the bare parse is the baseline.
        t_screen = time.perf_counter()
        try:
            ensure_parser_survives(str(path), data)
        except SourceError as exc:
            result.error = f"screen: line {exc.error.line}: {exc.error.message}"
            return result
        t0 = time.perf_counter()
        try:
            module = cst.parse_module(data)
        except Exception as exc:  # noqa: BLE001 - reported, the corpus run goes on
            result.error = f"parse: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            return result
        t1 = time.perf_counter()
        try:
            findings = analyse(module, _RULES, str(path), source=data).findings()
        except Exception:  # noqa: BLE001 - a bug in the engine; reported with where it happened
            last = traceback.format_exc().strip().splitlines()
            result.error = f"engine: {last[-1]} ({last[-3].strip() if len(last) > 2 else ''})"
            return result
        t2 = time.perf_counter()
        best_parse, best_analysis = min(best_parse, t1 - t0), min(best_analysis, t2 - t1 + t0 - t_screen)
        result.findings = len(findings)
    result.parse_s, result.analysis_s = best_parse, best_analysis
    return result


def _scan_chunk(args: tuple[list[Path], int]) -> list[FileResult]:
    paths, repeat = args
    return [scan_file(p, repeat) for p in paths]


def peak_rss_mb() -> float:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def run_serial(files: list[Path], repeat: int, rule_keys: Optional[list[str]]) -> tuple[Totals, float]:
    _init(rule_keys)
    totals = Totals()
    start = time.perf_counter()
    totals.add(_scan_chunk((files, repeat)))
    return totals, time.perf_counter() - start


def run_parallel(
    files: list[Path], jobs: int, repeat: int, rule_keys: Optional[list[str]]
) -> tuple[Totals, float, float]:
    """Wall time of the whole scan with `jobs` worker processes (start-up included) and their peak RSS."""
    # Largest files first, small chunks: the workers finish together.
    ordered = sorted(files, key=lambda p: p.stat().st_size, reverse=True)
    chunks = [(ordered[i : i + 4], repeat) for i in range(0, len(ordered), 4)]
    totals = Totals()
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(jobs, initializer=_init, initargs=(rule_keys,)) as pool:
        for results in pool.imap_unordered(_scan_chunk, chunks):
            totals.add(results)
        worker_rss = max(pool.map(_worker_rss, range(jobs)))
    return totals, time.perf_counter() - start, worker_rss


def _worker_rss(_: int) -> float:
    return peak_rss_mb()


def report(title: str, totals: Totals, wall: float) -> None:
    ok = totals.ok
    size_mb = sum(f.size for f in ok) / 1e6
    parse = sum(f.parse_s for f in ok)
    analysis = sum(f.analysis_s for f in ok)
    print(f"\n== {title}")
    print(f"files {len(totals.files)} ({len(ok)} scanned, {size_mb:.1f} MB), findings {sum(f.findings for f in ok)}")
    print(f"wall {wall:.2f} s: {len(totals.files) / wall:.1f} files/s, {size_mb / wall:.2f} MB/s")
    if parse:
        print(
            f"bare parse {parse:.2f} s ({size_mb / parse:.2f} MB/s), analysis {analysis:.2f} s "
            f"= {analysis / parse:.2f}x parse; ratio (parse+analysis)/parse = {(parse + analysis) / parse:.2f}"
        )
    failed = [f for f in totals.files if f.error is not None]
    print(f"failures: {len(failed)}")
    for f in failed:
        print(f"  {f.path}: {f.error}")


def profile(files: list[Path], rule_keys: Optional[list[str]], limit: int) -> None:
    """cProfile of the analysis only (modules parsed beforehand), top functions by cumulative time."""
    rules = select_rules(rule_keys)
    modules = []
    for p in files:
        data = p.read_bytes()
        try:
            modules.append((p, cst.parse_module(data), data))
        except Exception:  # noqa: BLE001 - listed by the timed run
            continue
    profiler = cProfile.Profile()
    profiler.enable()
    for path, module, data in modules:
        ensure_parser_survives("", data)
        analyse(module, rules, str(path), source=data).findings()
    profiler.disable()
    print("\n== cProfile of the analysis (cumulative)")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(limit)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="files or directories (default: the transformers corpus)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes for the parallel run (1: skip)")
    parser.add_argument("--rules", help="comma-separated codes (default: all rules)")
    parser.add_argument("--repeat", type=int, default=1, help="time each file this many times, keep the best")
    parser.add_argument("--limit", type=int, help="only the first N files (quick runs)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the analysis")
    parser.add_argument("--profile-lines", type=int, default=40)
    args = parser.parse_args(argv)
    files = expand(args.paths) if args.paths else default_corpus()
    if args.limit:
        files = files[: args.limit]
    rule_keys = args.rules.split(",") if args.rules else None
    print(f"{len(files)} files, rules: {', '.join(r.code for r in select_rules(rule_keys))}, repeat {args.repeat}")

    serial, serial_wall = run_serial(files, args.repeat, rule_keys)
    report("1 process", serial, serial_wall)
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    if args.jobs > 1:
        parallel, parallel_wall, worker_rss = run_parallel(files, args.jobs, args.repeat, rule_keys)
        report(f"-j {args.jobs} ({args.jobs} worker processes)", parallel, parallel_wall)
        print(f"peak RSS per worker {worker_rss:.0f} MB")
        print(f"speedup -j {args.jobs} vs 1 process: {serial_wall / parallel_wall:.2f}x")
    if args.profile:
        profile(files, rule_keys, args.profile_lines)
    return 1 if any(f.error for f in serial.files) else 0


if __name__ == "__main__":
    sys.exit(main())

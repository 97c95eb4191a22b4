"""Scan speed: the engine with all rules over a large real corpus, against a bare ``libcst.parse_module`` of the same
files measured in the same run. A script, not a test (docs/DESIGN.md §7):

    python benchmarks/bench_scan.py                 # one core, then -j 2
    python benchmarks/bench_scan.py -j 1 --profile  # where the analysis time goes (cProfile)

Corpus: every PyTorch ``models/*/modeling_*.py`` of the installed transformers (4.34.1: 206 files, 13.5 MB), or
the files/directories given. Per file, this process runs what ``scan --no-cache`` runs for it (``cli._scan_file``):
read the bytes, screen them for input that would crash LibCST's parser, decode, parse ("its parse": these three),
build the model structure, match every rule, place the findings and the skipped units, then the garbage collection
the file leaves pending ("analysis"). The baseline is the
bare parse of the same bytes in a child process that imports nothing but LibCST (a process that has run the
analysis parses slower: its collections traverse more objects). Goal (docs/PERFORMANCE.md): ratio = scan / bare
parse <= 1.2 on one core. Both are CPU times (a busy machine's wall clock varies too much), each the best of
``--repeat`` runs per file. ``python benchmarks/bench_cli.py`` measures the command end to end. Files that fail to
parse or make the engine raise are listed: an exception in the engine on real code is a bug.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import pstats
import resource
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
from adopter_codemods import cli, files  # noqa: E402
from adopter_codemods.engine import analyse, analyse_file  # noqa: E402
from adopter_codemods.files import ensure_parser_survives  # noqa: E402
from adopter_codemods.rules import select_rules  # noqa: E402

# The baseline's process: reads a path per line, answers with the CPU seconds of the best of `repeat` parses.
BARE_PARSE_CHILD = """\
import sys, time
import libcst
repeat = int(sys.argv[1])
for line in sys.stdin:
    with open(line.rstrip("\\n"), "rb") as handle:
        data = handle.read()
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        try:
            libcst.parse_module(data)
        except Exception:
            pass
        best = min(best, time.process_time() - start)
    print(best, flush=True)
"""


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
    bare_s: float = 0.0  # the baseline: bare parse in the child (0 in the parallel run)
    parse_s: float = 0.0  # the scan's own parse (screen and decoding included)
    analysis_s: float = 0.0  # the rest of the scan: structure, matching, positions of findings and skips
    wall_s: float = 0.0  # wall clock of every scan of the file (all repeats), for the -j speedup
    findings: int = 0
    error: Optional[str] = None  # "parse: ..." or "engine: ..." (with the traceback's last line)

    @property
    def scan_s(self) -> float:
        return self.parse_s + self.analysis_s


@dataclass
class Totals:
    files: list[FileResult] = field(default_factory=list)

    def add(self, results: list[FileResult]) -> None:
        self.files.extend(results)

    @property
    def ok(self) -> list[FileResult]:
        return [f for f in self.files if f.error is None]


_RULES: list = []  # per process: the selected rules (profile), loaded once
_PARSE_CPU = [0.0]  # CPU seconds spent in files.parse_file by this process


def _timed_parse_file(parse_file: Callable[[str, bytes], cst.Module]) -> Callable[[str, bytes], cst.Module]:
    def timed(path: str, data: bytes) -> cst.Module:
        start = time.process_time()
        try:
            return parse_file(path, data)
        finally:
            _PARSE_CPU[0] += time.process_time() - start

    return timed


def _init(rule_keys: Optional[list[str]]) -> None:
    _RULES[:] = select_rules(rule_keys)
    cli._init_worker(rule_keys, [], False)  # the rules of cli._scan_file; no cache
    # The scan's parse (screen, decoding and LibCST) is timed apart; the engine calls it through the module.
    files.parse_file = _timed_parse_file(files.parse_file)


class BareParser:
    """The child process timing the baseline parses."""

    def __init__(self, repeat: int) -> None:
        self.child = subprocess.Popen(
            [sys.executable, "-c", BARE_PARSE_CHILD, str(repeat)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def seconds(self, path: Path) -> float:
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write(f"{path}\n")
        self.child.stdin.flush()
        return float(self.child.stdout.readline())

    def close(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait()


def _engine_error(path: Path) -> str:
    """The traceback's last line and place of the exception `scan` reported as an internal error."""
    try:
        analysis = analyse_file(str(path), _RULES)
        analysis.findings()
        analysis.skips()
    except Exception:  # noqa: BLE001 - the bug being reported
        last = traceback.format_exc().strip().splitlines()
        return f"engine: {last[-1]} ({last[-3].strip() if len(last) > 2 else ''})"
    return "engine: raised under scan only"


def scan_file(path: Path, repeat: int, bare: Optional[BareParser]) -> FileResult:
    """The best of `repeat` runs of what ``scan`` does for the file (``cli._scan_file``), in CPU time."""
    result = FileResult(str(path), path.stat().st_size)
    best_parse = best_analysis = float("inf")
    for _ in range(repeat):
        start, parse_before = time.perf_counter(), _PARSE_CPU[0]
        cpu = time.process_time()
        scanned = cli._scan_file(str(path), with_fix=False)
        _pending_collection()
        cpu = time.process_time() - cpu
        result.wall_s += time.perf_counter() - start
        if scanned.error is not None:
            internal = scanned.error.message.startswith("internal error")
            result.error = _engine_error(path) if internal else f"parse: line {scanned.error.line}: {scanned.error.message}"
            return result
        parse_s = _PARSE_CPU[0] - parse_before
        result.findings = len(scanned.findings)
        best_parse, best_analysis = min(best_parse, parse_s), min(best_analysis, cpu - parse_s)
    result.parse_s, result.analysis_s = best_parse, best_analysis
    if bare is not None:
        result.bare_s = bare.seconds(path)
    return result


def _pending_collection() -> None:
    """Run the garbage collection a file leaves pending, as ``scan`` does at its next allocation: the collector is
    paused for each file (``gc_pause``), so its allocation count is far past the threshold and the next container
    allocated starts a collection, which traverses whatever the file left in reference cycles."""
    list()


def _scan_chunk(args: tuple[list[Path], int]) -> list[FileResult]:
    paths, repeat = args
    return [scan_file(p, repeat, None) for p in paths]


def peak_rss_mb() -> float:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def run_serial(files: list[Path], repeat: int, rule_keys: Optional[list[str]]) -> tuple[Totals, float]:
    """The results and the wall time of the scans alone (the baseline's child runs in between)."""
    _init(rule_keys)
    totals = Totals()
    bare = BareParser(repeat)
    try:
        totals.add([scan_file(p, repeat, bare) for p in files])
    finally:
        bare.close()
    return totals, sum(f.wall_s for f in totals.files)


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
    bare = sum(f.bare_s for f in ok)
    parse = sum(f.parse_s for f in ok)
    analysis = sum(f.analysis_s for f in ok)
    print(f"\n== {title}")
    print(f"files {len(totals.files)} ({len(ok)} scanned, {size_mb:.1f} MB), findings {sum(f.findings for f in ok)}")
    print(f"wall {wall:.2f} s: {len(totals.files) / wall:.1f} files/s, {size_mb / wall:.2f} MB/s")
    print(f"scan CPU {parse + analysis:.2f} s: its parse {parse:.2f} s, analysis {analysis:.2f} s")
    if bare:
        print(
            f"bare parse (child process) {bare:.2f} s ({size_mb / bare:.2f} MB/s); scan's parse {parse / bare:.2f}x, "
            f"analysis {analysis / bare:.2f}x the bare parse; ratio scan / bare parse = {(parse + analysis) / bare:.2f}"
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
        analysis = analyse(module, rules, str(path), source=data)
        analysis.findings()
        analysis.skips()
    profiler.disable()
    print("\n== cProfile of the analysis (cumulative)")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(limit)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="files or directories (default: the transformers corpus)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes for the parallel run (1: skip)")
    parser.add_argument("--rules", help="comma-separated codes (default: all, every built-in rule)")
    parser.add_argument("--repeat", type=int, default=1, help="time each file this many times, keep the best")
    parser.add_argument("--limit", type=int, help="only the first N files (quick runs)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the analysis")
    parser.add_argument("--profile-lines", type=int, default=40)
    args = parser.parse_args(argv)
    files = expand(args.paths) if args.paths else default_corpus()
    if args.limit:
        files = files[: args.limit]
    rule_keys = args.rules.split(",") if args.rules else ["all"]
    print(f"{len(files)} files, rules: {', '.join(r.code for r in select_rules(rule_keys))}, repeat {args.repeat}")

    serial, serial_wall = run_serial(files, args.repeat, rule_keys)
    report("1 process", serial, serial_wall)
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    if args.jobs > 1:
        parallel, parallel_wall, worker_rss = run_parallel(files, args.jobs, args.repeat, rule_keys)
        report(f"-j {args.jobs} ({args.jobs} worker processes; no baseline)", parallel, parallel_wall)
        print(f"peak RSS per worker {worker_rss:.0f} MB")
        print(f"speedup -j {args.jobs} vs 1 process: {serial_wall / parallel_wall:.2f}x")
    if args.profile:
        profile(files, rule_keys, args.profile_lines)
    return 1 if any(f.error for f in serial.files) else 0


if __name__ == "__main__":
    sys.exit(main())

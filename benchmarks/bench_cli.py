"""Scan speed end to end: ``python -m adopter_codemods scan --no-cache -j 1 DIR`` as a process (start-up, imports, rule
loading, discovery, reading, parsing, analysis and the report included) against a process that only imports LibCST
and runs a bare ``libcst.parse_module`` on the same files. A script, not a test (docs/DESIGN.md §7):

    python benchmarks/bench_cli.py                 # the transformers corpus, 3 interleaved repeats
    python benchmarks/bench_cli.py --repeat 5 DIR  # any other corpus (files or directories)
    python benchmarks/bench_cli.py --compare /tmp/main  # also time the scan of another checkout, interleaved

Goal (docs/PERFORMANCE.md): median wall time of the scan <= 1.3x the median of the bare-parse process. The
two commands alternate (baseline first, then the scan first, ...) so that a change of the machine's load hits
both; the medians of the wall clock and of the CPU time of each process (user + system, steadier on a busy
machine) are printed with their ratios.

The files are copied into a temporary directory, and both processes run with a bytecode cache in another
(``PYTHONPYCACHEPREFIX``; one untimed run of each first), as an installed package has its modules compiled:
without it every process would recompile this package's sources.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scan import default_corpus, expand  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# The baseline: import LibCST, find the *.py files as `scan` does (sorted walk), read and parse each.
BARE_PARSE = """\
import os, sys
import libcst
for root, dirs, files in os.walk(sys.argv[1]):
    dirs.sort()
    for name in sorted(files):
        if name.endswith(".py"):
            with open(os.path.join(root, name), "rb") as handle:
                libcst.parse_module(handle.read())
"""


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    returncode: int
    stdout: str


def run_process(command: list[str], env: dict[str, str], cwd: Path) -> Run:
    """Wall time and CPU time (user + system of the child) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, done.returncode, done.stdout)


def copy_corpus(files: Sequence[Path], into: Path) -> Path:
    """The files under one directory, each keeping its path relative to the files' common directory."""
    common = Path(os.path.commonpath([str(p.resolve().parent) for p in files]))
    target = into / "corpus"
    for p in files:
        dest = target / p.resolve().relative_to(common)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest)
    return target


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="files or directories (default: the transformers corpus)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each command (interleaved)")
    parser.add_argument("--limit", type=int, help="only the first N files (quick runs)")
    parser.add_argument("--compare", metavar="CHECKOUT", help="also time `scan` of the package in this source tree")
    args = parser.parse_args(argv)
    files = expand(args.paths) if args.paths else default_corpus()
    if args.limit:
        files = files[: args.limit]
    if not files:
        print("no files", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench_cli_") as tmp:
        corpus = copy_corpus(files, Path(tmp))
        # One process, as the baseline (without -j, scan would use a worker per CPU for this many files).
        scan = [sys.executable, "-m", "adopter_codemods", "scan", "--no-cache", "--no-progress", "-j", "1", str(corpus)]
        # `python -m` puts the working directory first on the path: each scan runs in its own checkout.
        commands = {"bare parse": ([sys.executable, "-c", BARE_PARSE, str(corpus)], environment(ROOT, Path(tmp)), ROOT)}
        commands["scan"] = (scan, environment(ROOT, Path(tmp)), ROOT)
        if args.compare:
            other = Path(args.compare).resolve()
            commands[f"scan of {args.compare}"] = (scan, environment(other, Path(tmp)), other)
        size_mb = sum(p.stat().st_size for p in files) / 1e6
        print(f"{len(files)} files ({size_mb:.1f} MB), {args.repeat} interleaved runs each, load {os.getloadavg()[0]:.1f}")
        warm = {name: run_process(*command) for name, command in commands.items()}  # compiles the bytecode; untimed
        if warm["bare parse"].returncode != 0 or any(r.returncode not in (0, 1) for r in warm.values()):
            print(f"a command failed: {[(n, r.returncode) for n, r in warm.items()]}", file=sys.stderr)
            return 2
        runs: dict[str, list[Run]] = {name: [] for name in commands}
        width = max(map(len, commands))
        for i in range(args.repeat):
            order = list(commands) if i % 2 == 0 else list(reversed(commands))
            for name in order:
                runs[name].append(run_process(*commands[name]))
                print(f"  {name:{width}s} run {i + 1}: wall {runs[name][-1].wall_s:6.2f} s, cpu {runs[name][-1].cpu_s:6.2f} s")
        print(f"load {os.getloadavg()[0]:.1f}")
        base_wall = median([r.wall_s for r in runs["bare parse"]])
        base_cpu = median([r.cpu_s for r in runs["bare parse"]])
        print(f"{'bare parse':{width}s}: median wall {base_wall:6.2f} s, CPU {base_cpu:6.2f} s")
        for name in list(commands)[1:]:
            wall, cpu = median([r.wall_s for r in runs[name]]), median([r.cpu_s for r in runs[name]])
            findings = len(warm[name].stdout.splitlines())
            print(
                f"{name:{width}s}: median wall {wall:6.2f} s, CPU {cpu:6.2f} s; ratio to the bare parse: "
                f"wall {wall / base_wall:.2f}, CPU {cpu / base_cpu:.2f} ({findings} findings)"
            )
    return 0


def environment(package_root: Path, tmp: Path) -> dict[str, str]:
    """This environment with `package_root` first on the path and a bytecode cache under `tmp`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(package_root), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


if __name__ == "__main__":
    sys.exit(main())

"""Fixit front-end speed: ``fixit lint`` with the Adopter rules against ``scan --no-cache`` on the same files,
measured in one run. A script, not a test (docs/DESIGN.md §7):

    python benchmarks/bench_fixit.py               # six transformers model files, best of 3, one process each
    python benchmarks/bench_fixit.py --cli         # also the two commands as subprocesses (wall clock)
    python benchmarks/bench_fixit.py --with-fix    # also Fixit's API, which builds the autofix (as `fixit fix`)
    python benchmarks/bench_fixit.py --profile     # plus a cProfile of the Fixit run
    python benchmarks/bench_fixit.py path/to/src   # any other files or directories

Both run in this process on one core: Fixit through ``fixit.api.fixit_paths(..., parallel=False)`` (what ``fixit
lint`` runs per file, config lookup included) inside the click context of Fixit's ``lint`` command without
``--diff``, so the rules skip the unused autofix as under ``fixit lint`` (``adopter_codemods.lint.mode``), on a
throwaway project whose ``pyproject.toml`` enables ``adopter_codemods.lint`` only; ``scan`` through
``adopter_codemods.cli.main(["scan", "--no-cache", ...])``. The two alternate, each timed as the best of
``--repeat`` runs in CPU time of this process, so the ratio holds on a busy machine. Goal (docs/PERFORMANCE.md):
ratio = Fixit / scan <= 1.5.
``--with-fix`` also times ``fixit_paths`` outside that context (the API, ``fixit lint --diff``, ``fixit fix``),
where the rules build the whole-file fix and Fixit diffs it.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from adopter_codemods import cli  # noqa: E402

MODELS = ("bert", "gpt2", "t5", "roberta", "bart", "llama")
CONFIG = '[tool.fixit]\nroot = true\nenable = ["adopter_codemods.lint"]\ndisable = ["fixit.rules"]\n'


def default_corpus() -> list[Path]:
    import transformers

    models = Path(transformers.__file__).parent / "models"
    return [models / name / f"modeling_{name}.py" for name in MODELS]


def expand(paths: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p])
    return out


def run_fixit(files: Sequence[Path]) -> int:
    """`fixit lint` without `--diff`, as the rules see it."""
    from fixit import cli as fixit_cli

    with fixit_cli.lint.make_context("lint", [str(f) for f in files]):
        return run_fixit_api(files)


def run_fixit_api(files: Sequence[Path]) -> int:
    from fixit.api import fixit_paths

    results = list(fixit_paths(files, parallel=False))
    errors = [r for r in results if r.error]
    if errors:
        raise RuntimeError(f"fixit failed on {errors[0].path}: {errors[0].error[1]}")  # type: ignore[index]
    return sum(r.violation is not None for r in results)


def run_scan(files: Sequence[Path]) -> int:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = cli.main(["scan", "--no-cache", "--no-progress", "--format", "text", *map(str, files)])
    if status not in (0, 1):
        raise RuntimeError(f"scan exited {status}")
    return len(out.getvalue().splitlines())


def best(fn: Callable[[], int], timings: list[float]) -> int:
    # CPU time of this process: on a shared machine it varies much less than the wall clock, and both run here.
    start = time.process_time()
    count = fn()
    timings.append(time.process_time() - start)
    return count


def cli_wall(argv: list[str], cwd: Path) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="files or directories (default: six transformers model files)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs each (default 3)")
    parser.add_argument("--with-fix", action="store_true", help="also time Fixit's API, which builds the autofix")
    parser.add_argument("--cli", action="store_true", help="also time `fixit lint` and `scan` as subprocesses")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one Fixit run")
    args = parser.parse_args()
    sources = expand(args.paths) if args.paths else default_corpus()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
        (project / "src").mkdir()
        files = []
        for i, source in enumerate(sources):
            files.append(project / "src" / f"{i:03d}_{source.name}")
            shutil.copyfile(source, files[-1])
        size = sum(f.stat().st_size for f in files)
        print(f"{len(files)} files, {size / 1e6:.2f} MB, best of {args.repeat}")
        run_fixit(files[:1])  # imports and rule collection outside the timings
        fixit_s: list[float] = []
        scan_s: list[float] = []
        api_s: list[float] = []
        for _ in range(args.repeat):
            lint_count = best(lambda: run_fixit(files), fixit_s)
            scan_count = best(lambda: run_scan(files), scan_s)
            if args.with_fix:
                best(lambda: run_fixit_api(files), api_s)
        print(f"fixit lint (in process, CPU):          {min(fixit_s):7.2f} s  {lint_count} findings")
        print(f"scan --no-cache (in process, CPU):     {min(scan_s):7.2f} s  {scan_count} findings")
        print(f"ratio fixit / scan: {min(fixit_s) / min(scan_s):.2f}  (goal <= 1.5)")
        if api_s:
            api = min(api_s)
            print(f"fixit API, autofix built (CPU):        {api:7.2f} s  ratio to scan {api / min(scan_s):.2f}")
        if lint_count != scan_count:
            print(f"warning: {lint_count} Fixit findings but {scan_count} from scan")
        if args.cli:
            fixit_cmd = [sys.executable, "-m", "fixit", "lint", "src"]
            fixit_wall = min(cli_wall(fixit_cmd, project) for _ in range(args.repeat))
            scan_cmd = [sys.executable, "-m", "adopter_codemods", "scan", "--no-cache", "--no-progress", "src"]
            scan_wall = min(cli_wall(scan_cmd, project) for _ in range(args.repeat))
            print(f"`fixit lint src` (its process pool):   {fixit_wall:7.2f} s wall")
            print(f"`scan --no-cache src` (1 process):      {scan_wall:7.2f} s wall")
            print(f"ratio (commands, wall): {fixit_wall / scan_wall:.2f}")
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(run_fixit, files)
            pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())

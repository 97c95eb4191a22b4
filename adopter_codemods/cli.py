"""The ``adopter-codemods`` command line (``python -m adopter_codemods``): scan, rewrite, list, explain, demo, init.

A thin adapter: files come from :mod:`.files`, matching and rewriting from :mod:`.engine`, output formats from
:mod:`.report`. Files are processed independently (optionally in worker processes) and reported in input order.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TextIO, TypeVar

from . import __version__, guards, matcher
from .cache import DEFAULT_DIR, ENV_DIR, ScanCache
from .dsl import Rule, RuleSyntaxError
from .engine import Finding, RefusedSite, Skip, analyse_file, analyse_source
from .files import FileError, SourceError, atomic_write, discover
from .gc_pause import collector_paused
from .init_config import CONFIG_NAME, write_config
from .report import (
    Replacement,
    ScanResults,
    error_line,
    format_json,
    format_sarif,
    format_text,
    plain,
    script_note,
    unscriptable_note,
    skip_line,
    summary,
    text_replacements,
    unified_diff,
)
from .rules import builtin_rules, doc_sections, fast_by_default, rule_doc, rule_targets, select_rules
from .torchscript import ScriptConflict, added_unscriptable, script_conflict

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXAMPLE = ("examples", "bert_like.py")  # inside the package, so `demo` works from an installed wheel
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"  # source checkouts only; wheels do not ship them

T = TypeVar("T")


class UsageError(Exception):
    """A problem with the command line or a rule file: nothing was processed."""


def _rule_keys(values: Optional[Sequence[str]]) -> Optional[list[str]]:
    keys = [k.strip() for v in values or () for k in v.split(",") if k.strip()]
    return keys or None


def _left_out_by_default() -> list[str]:
    """The codes of the built-in rules the default selection leaves out (their kernels are not faster anywhere)."""
    return [r.code for r in builtin_rules() if not fast_by_default(r)]


def _select(keys: Optional[list[str]], rule_files: Sequence[str]) -> list[Rule]:
    try:
        return select_rules(keys, [Path(f) for f in rule_files])
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    except RuleSyntaxError as exc:
        raise UsageError(f"malformed rule file: {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot read rule file {exc.filename}: {exc.strerror}") from None


# ----------------------------------------------------------------------------------------- per-file work

# The rules of this process: set once per worker (they are re-selected there rather than pickled, so guards
# registered on import exist under every start method).
_RULES: list[Rule] = []


_CACHE: list[ScanCache] = []  # this process's scan cache; empty with --no-cache and for other commands


def _init_worker(keys: Optional[list[str]], rule_files: Sequence[str], use_cache: bool = False) -> None:
    _RULES[:] = select_rules(keys, [Path(f) for f in rule_files])
    _CACHE[:] = [ScanCache.default(_RULES)] if use_cache else []


def _internal_error(path: str, exc: Exception) -> FileError:
    return FileError(path, None, f"internal error ({type(exc).__name__}: {exc}); please report it with this file")


@dataclass
class _Scanned:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: Optional[FileError] = None
    fix: list[Replacement] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    refused: list[RefusedSite] = field(default_factory=list)


def _cached_scan(path: str) -> Optional[_Scanned]:
    """The cached result for the file's current bytes, if this process has a cache and holds one."""
    data = _readable(path) if _CACHE else None
    cached = _CACHE[0].get(data, path) if _CACHE and data is not None else None
    return _Scanned(path, cached[0], skipped=cached[1]) if cached is not None else None


@collector_paused  # for the file's whole life, parse included: see gc_pause
def _scan_file(path: str, with_fix: bool, show_refused: bool = False) -> _Scanned:
    """Analyse a file (`cmd_scan` has served its cache hits already) and cache the result."""
    try:
        cache = _CACHE[0] if _CACHE and not with_fix else None  # SARIF also reports fixes: not cached
        data = _readable(path) if cache else None
        analysis = analyse_file(path, _RULES, data, with_refusals=show_refused)
        findings, skipped = analysis.findings(), analysis.skips()
        if cache and data is not None:  # judged on these very bytes, even if the file was edited meanwhile
            cache.put(data, findings, skipped, analysis.structure.dependencies)
        fix: list[Replacement] = []
        if with_fix and any(f.fixable for f in findings):
            fix = text_replacements(analysis.module.code, analysis.rewrite().module.code)
        return _Scanned(path, findings, fix=fix, skipped=skipped, refused=analysis.refused())
    except SourceError as exc:
        return _Scanned(path, error=exc.error)
    except Exception as exc:  # one file crashing the engine must not hide the results of the others
        return _Scanned(path, error=_internal_error(path, exc))


def _readable(path: str) -> Optional[bytes]:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None  # analyse_file reports it


@dataclass
class _Rewritten:
    path: str
    changed: bool = False
    codes: tuple[str, ...] = ()
    diff: str = ""
    error: Optional[FileError] = None
    skipped: list[Skip] = field(default_factory=list)
    unscriptable: tuple[str, ...] = ()  # kernels TorchScript cannot compile that the file now calls
    script: Optional[ScriptConflict] = None  # the file uses TorchScript and now calls such kernels


@collector_paused  # as _scan_file
def _rewrite_file(path: str, write: bool, with_diff: bool) -> _Rewritten:
    try:
        analysis = analyse_file(path, _RULES)
        module, outcome = analysis.module, analysis.rewrite()
        skipped = analysis.skips()  # of the input: later rounds re-walk the rewritten module
        if outcome.module.code == module.code:
            return _Rewritten(path, skipped=skipped)
        diff = unified_diff(module.code, outcome.module.code, path) if with_diff else ""
        if write:
            atomic_write(path, outcome.module.bytes)  # the file's own encoding and newlines
        unscriptable = added_unscriptable(module, outcome.module)
        script = script_conflict(module, unscriptable)
        return _Rewritten(path, True, outcome.codes, diff, skipped=skipped, unscriptable=unscriptable, script=script)
    except SourceError as exc:
        return _Rewritten(path, error=exc.error)
    except OSError as exc:
        return _Rewritten(path, error=FileError(path, None, f"cannot write file: {exc.strerror or exc}"))
    except Exception as exc:  # one file crashing the engine must not hide the results of the others
        return _Rewritten(path, error=_internal_error(path, exc))


class _Progress:
    """``[done/total] path`` on one self-overwriting stderr line."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.width = shutil.get_terminal_size().columns - 1

    def step(self, done: int, path: str) -> None:
        self.stream.write(f"\r\x1b[K{f'[{done}/{self.total}] {path}'[: self.width]}")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r\x1b[K")
        self.stream.flush()


# Without `--jobs`, a worker process per usable CPU, but one only for every this many files: starting a worker costs
# about as much as analysing a few small files (with "spawn", macOS's and Windows' start method, it imports LibCST
# and the rules again), so a handful of files (a pre-commit run, one model file) stays in this process.
FILES_PER_WORKER = 16


def _cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> Optional[int]:
    """The CPUs a cgroup quota grants this process (a container run with ``--cpus``, a Kubernetes CPU limit), rounded
    up; None without one. The CPU affinity there still lists every core of the host."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]  # cgroup v2: "max 100000" or "150000 100000"
    except (OSError, ValueError):
        try:  # cgroup v1: a quota of -1 is none
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if not (quota.isdigit() and period.isdigit()) or int(quota) == 0 or int(period) == 0:
        return None
    return -(-int(quota) // int(period))


def _usable_cpus() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cpu_quota()
    return min(cpus, quota) if quota is not None else cpus


def _job_count(jobs: Optional[int], files: int) -> int:
    """Worker processes for `files` files: `jobs` (0: one per usable CPU), or when None one per usable CPU and per
    :data:`FILES_PER_WORKER` files; never more than the files, at least 1. Usable CPUs: those of the process's
    affinity, no more than its cgroup quota grants."""
    cpus = _usable_cpus()
    if jobs is None:
        return max(1, min(cpus, files // FILES_PER_WORKER))
    return max(1, min(jobs or cpus, files))


def _run(
    worker: Callable[[str], T],
    paths: list[str],
    jobs: Optional[int],
    init: tuple[Any, ...],
    show_progress: bool,
    served: Optional[Callable[[str], Optional[T]]] = None,
) -> list[T]:
    """Run ``worker`` on every path, in ``jobs`` processes when > 1 (None: see :func:`_job_count`); results in input
    order. `served`: the result of a path this process has at hand (a cache hit), else None; no worker runs for
    those, so a re-run of unchanged files starts no worker process."""
    _init_worker(*init)
    ready: list[Optional[T]] = [served(p) for p in paths] if served is not None else [None] * len(paths)
    todo = [p for p, result in zip(paths, ready) if result is None]
    jobs = _job_count(jobs, len(todo))
    progress = _Progress(len(paths), sys.stderr) if show_progress and sys.stderr.isatty() and paths else None
    results: list[T] = []
    pool = None
    if jobs > 1:
        import multiprocessing  # only here: a one-process run does without its imports

        pool = multiprocessing.get_context().Pool(jobs, _init_worker, init)
    try:
        computed = pool.imap(worker, todo) if pool else map(worker, todo)
        for done, (path, result) in enumerate(zip(paths, ready), 1):
            results.append(result if result is not None else next(computed))
            if progress:
                progress.step(done, path)
    finally:
        if pool:
            pool.terminate()
            pool.join()
        if progress:
            progress.close()
    return results


# ---------------------------------------------------------------------------------------------- commands


def cmd_scan(args: argparse.Namespace) -> int:
    keys = _rule_keys(args.rules)
    rules = _select(keys, args.rule_file)
    # As ruff does: no PATH means the current directory, except for the pre-commit hook, which lists the files.
    roots = args.paths or ([] if args.no_default_path else [os.curdir])
    paths, errors = discover(roots, args.exclude)
    with_fix = args.format == "sarif"
    worker = functools.partial(_scan_file, with_fix=with_fix, show_refused=args.show_refused)
    use_cache = not args.no_cache and not args.show_refused  # refusals are not stored in the cache
    served = _cached_scan if use_cache and not with_fix else None
    init = (keys, args.rule_file, use_cache)
    scanned = _run(worker, paths, args.jobs, init, not args.no_progress, served)
    errors += [s.error for s in scanned if s.error]
    results = ScanResults(
        files_scanned=sum(s.error is None for s in scanned),
        findings=[f for s in scanned for f in s.findings],
        errors=errors,
        fixes={s.path: s.fix for s in scanned if s.fix},
        skipped=[u for s in scanned for u in s.skipped],
        refused=[r for s in scanned for r in s.refused] if args.show_refused else None,
    )
    if args.format == "json":
        sys.stdout.write(format_json(results))
    elif args.format == "sarif":
        sys.stdout.write(format_sarif(results, rules))
    else:
        sys.stdout.write(format_text(results))
        sys.stdout.flush()
        for skip in results.skipped:
            print(skip_line(skip), file=sys.stderr)
        print(summary(results), file=sys.stderr)
        if not results.findings and not keys and not args.rule_file:
            left_out = ", ".join(_left_out_by_default())
            print(f"note: the default rules ran; --rules all also runs {left_out}, whose kernels run the original "
                  "computation by default", file=sys.stderr)
    if results.errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if results.findings else EXIT_OK


def cmd_rewrite(args: argparse.Namespace) -> int:
    keys = _rule_keys(args.rules)
    _select(keys, args.rule_file)  # report bad rules before touching any file
    paths, errors = discover(args.paths, args.exclude)
    write = not (args.diff or args.check)
    worker = functools.partial(_rewrite_file, write=write, with_diff=args.diff)
    done = _run(worker, paths, args.jobs, (keys, args.rule_file), not args.no_progress)
    for r in done:
        sys.stdout.write(r.diff)
    sys.stdout.flush()
    changed = [r for r in done if r.changed]
    for r in changed:
        print(f"{'rewrote' if write else 'would rewrite'} {r.path} ({', '.join(r.codes)})", file=sys.stderr)
        if r.script is not None:
            print(script_note(r.path, r.script), file=sys.stderr)
    # Files without TorchScript's API: a model may still be scripted from another file (open_clip, smp), so once.
    unnoted = [r for r in changed if r.unscriptable and r.script is None]
    if unnoted:
        print(unscriptable_note(len(unnoted), write), file=sys.stderr)
    for skip in (u for r in done for u in r.skipped):
        print(skip_line(skip), file=sys.stderr)
    errors += [r.error for r in done if r.error]
    for e in errors:
        print(error_line(e), file=sys.stderr)
    verb = "rewritten" if write else "would be rewritten"
    unchanged = len(done) - len(changed) - sum(r.error is not None for r in done)
    line = f"{len(changed)} file{'s' * (len(changed) != 1)} {verb}, {unchanged} unchanged"
    if errors:
        line += f"; {len(errors)} input{'s' * (len(errors) != 1)} could not be processed"
    print(line, file=sys.stderr)
    if errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if args.check and changed else EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    rows = [("CODE", "NAME", "FAST BY DEFAULT", "TARGET", "SUMMARY")]
    rows += [(r.code, r.name, r.fast or "-", ", ".join(rule_targets(r)) or "-", r.summary) for r in builtin_rules()]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4])
    opt_in = _left_out_by_default()
    if opt_in:
        note = (f"{', '.join(opt_in)} (FAST BY DEFAULT none) rewrite to kernels that run the original computation "
                "unless ADOPTER_KERNELS_BACKEND forces a backend: scan, rewrite, demo and AdoptFast run them only "
                f"when named (--rules {opt_in[0]}, or --rules all); AdoptAll runs every rule.")
        print("\n" + textwrap.fill(note, 100))
    return EXIT_OK


def _rule_sections(rule: Rule) -> str:
    """The rule file's ``init:``/``forward:`` sections as written (comments included), under their variant labels."""
    lines = Path(rule.path).read_text(encoding="utf-8").splitlines()
    variants = (rule, *rule.alternatives)
    starts = sorted(item.line for v in variants for item in (v.init, v.forward) if item is not None)
    chunks = []
    for variant in variants:
        if variant.variant:
            chunks.append(f"variant {json.dumps(variant.variant)}")
        for item in sorted((i for i in (variant.init, variant.forward) if i is not None), key=lambda i: i.line):
            following = [s for s in starts if s > item.line]
            section = lines[item.line - 1 : following[0] - 1 if following else len(lines)]
            while section and (not section[-1].strip() or section[-1].lstrip().startswith("variant ")):
                section.pop()  # the gap before the next section, and the next variant's label
            chunks.append("\n".join(section))
    return "\n".join(chunks)


def _fixture_example(rule: Rule) -> Optional[tuple[str, str]]:
    """``(fixture path, diff)`` of the rule on its first positive fixture that it rewrites."""
    for case in sorted(FIXTURES.glob(f"{rule.code}_*/*.py")):
        if case.name.endswith(".expected.py") or case.name.startswith("neg_"):
            continue
        try:
            analysis = analyse_file(str(case), [rule])
        except SourceError:
            continue
        module, rewritten = analysis.module, analysis.rewrite().module
        if rewritten.code != module.code:
            label = case.relative_to(FIXTURES.parent).as_posix()
            return label, unified_diff(module.code, rewritten.code, label)
    return None


_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
# "text::" introduces an indented literal block in RST and reads as "text:"; a bare "::" line reads as nothing.
_RST_BLOCK_MARKER = re.compile(r"(?:(?<=\S)::$|^[ \t]*::\n)", re.MULTILINE)


def _plain(text: str) -> str:
    """Docstring prose for a terminal: RST inline literals (code between double backquotes) and literal-block
    markers (a trailing ``::``) shown as plain text."""
    return _RST_BLOCK_MARKER.sub(lambda m: ":" if m.group().startswith(":") else "", _RST_LITERAL.sub(r"\1", text))


def cmd_explain(args: argparse.Namespace) -> int:
    rule = _select([args.rule], [])[0]
    out = [f"{rule.code} {rule.name}: {rule.summary}", f"rule file: {rule.path}", ""]
    out += ["What it matches (from the rule file):", textwrap.indent(_rule_sections(rule), "    "), ""]
    out.append("Preconditions:")
    for name in dict.fromkeys(g for variant in (rule, *rule.alternatives) for g in variant.guards):
        first = (guards.get(name).__doc__ or "").strip().split("\n\n")[0]
        out.append(f"  - guard {name}: {_plain(' '.join(first.split()))}" if first else f"  - guard {name}")
    generic = _plain((matcher.__doc__ or "").split("\n\n", 1)[-1].strip())  # the matcher's own account of its checks
    out.append("  - how every rule is matched and the safety checks it must pass (adopter_codemods.matcher):")
    out += [textwrap.indent(generic, "      "), ""]
    out += [f"Target: {', '.join(rule_targets(rule)) or 'rewrites the matched calls in place'}"]
    if not fast_by_default(rule):
        out.append("Fast by default: nowhere (its kernels measured slower or no faster than the original computation, "
                   "which runs; ADOPTER_KERNELS_BACKEND forces them)")
        out.append(f"Runs only when named: --rules {rule.code} (or all), the {rule.name} codemod, AdoptAll; "
                   "scan, rewrite and AdoptFast leave it out by default")
    elif rule.fast:
        out.append(f"Fast by default: {rule.fast} (where measured faster; elsewhere the original computation runs)")
    out.append("")
    doc = rule_doc(rule)
    sections = doc_sections(doc) if doc else []
    example = _fixture_example(rule)
    for title, text in sections:
        if title == "":
            text = text.split("\n", 1)[1].strip() if "\n" in text else ""  # the first line repeats the summary
        if title.lower() != "example":  # a code block: shown as written
            text = plain(text)
        if text and not (title.lower() == "example" and example):
            out += [f"{title}:" if title else "", textwrap.indent(text, "    ") if title else text, ""]
    if example:
        label, diff = example
        out += [f"Example (generated by running {rule.name} on {label}):", diff]
    elif not any(title.lower() == "example" for title, _ in sections):
        out.append("Example: none available (no fixture found and no example in the rule's documentation).")
    sys.stdout.write("\n".join(line for line in out).rstrip("\n") + "\n")
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    try:
        path = write_config(Path.cwd(), force=args.force)
    except FileExistsError:
        raise UsageError(f"{CONFIG_NAME} already exists here; --force overwrites it") from None
    print(f"wrote {path.name}: LibCST codemods now skip virtual environments, build output and site-packages")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from importlib import resources  # here, not at import: it imports tempfile, which scan never needs

    data = resources.files("adopter_codemods").joinpath(*EXAMPLE).read_bytes()
    label = "/".join(("adopter_codemods", *EXAMPLE))
    keys = _rule_keys(args.rules)
    rules = _select(keys, [])
    analysis = analyse_source(data, rules, label)
    module = analysis.module
    if args.source:
        sys.stdout.write(module.code)
        return EXIT_OK
    chosen = " ".join(keys) if keys else "the default rules"
    print(f"# rewrite with {chosen} ({', '.join(r.code for r in rules)}) on the bundled example {label}; "
          "nothing is written.", file=sys.stderr)
    if not keys:
        print(f"# `demo --rules all` also shows {', '.join(_left_out_by_default())}, whose kernels run the original computation "
              "by default.", file=sys.stderr)
    rewritten = analysis.rewrite().module
    sys.stdout.write(unified_diff(module.code, rewritten.code, label))
    return EXIT_OK


# ------------------------------------------------------------------------------------------------ parser

_EXIT_CODES = """\
exit status:
  0  nothing found / nothing to change
  1  findings (scan), or files would change (rewrite --check)
  2  some input could not be processed (the rest is still reported), or a usage/rule-file error"""


def _add_rule_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rules",
        action="append",
        metavar="CODES",
        help="comma-separated codes or names of rules to run (e.g. ADP005,FastSoftmax; a --rule-file's own code; "
        "'fast': the built-in rules whose kernels take a fast path somewhere by default; 'all': every built-in "
        "rule); default: 'fast' (see `list`), or only the --rule-file rules when given",
    )
    parser.add_argument(
        "--rule-file",
        action="append",
        default=[],
        metavar="FILE.adopter",
        help="run the rule in this DSL file (repeatable); built-in rules then run only if --rules names them",
    )


def _add_file_options(parser: argparse.ArgumentParser, no_path: str) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH", help=f"files or directories (walked for *.py); {no_path}")
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip files/directories whose name or path matches GLOB (repeatable); .git, venvs, build, dist, "
        "node_modules, __pycache__, site-packages, ... are always skipped when walking directories",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        metavar="N",
        help=f"process files in N processes (0: one per CPU); default: one per CPU, at most one per "
        f"{FILES_PER_WORKER} files (fewer files run in this process)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr (shown on a TTY)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adopter-codemods",
        description="Find and rewrite PyTorch model code that can use optimized kernels (Adopter, ISSTA 2024).",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, help: str, description: str, func: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help,
            description=textwrap.fill(description, 100),  # the raw formatter keeps the epilog table as is
            epilog=_EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(func=func)
        return p

    scan = add(
        "scan",
        "report rewrite sites (text, JSON or SARIF); changes no file (keeps a re-run cache in ./.adopter_cache)",
        "Report every place a rule can rewrite. Text goes to stdout as `path:line:col: CODE message` with a summary "
        "on stderr; --format json prints the machine-readable report, --format sarif a SARIF 2.1.0 log for GitHub "
        "code scanning. --show-refused also lists each site a rule matched structurally but refused, with the "
        "reason and the line causing it.",
        cmd_scan,
    )
    _add_file_options(scan, "default: the current directory")
    scan.add_argument(
        "--no-default-path",
        action="store_true",
        help="with no PATH scan nothing instead of the current directory (the pre-commit hook passes its files)",
    )
    _add_rule_options(scan)
    scan.add_argument(
        "--format", choices=("text", "json", "sarif"), default="text", help="output format (default: text)"
    )
    scan.add_argument(
        "--show-refused",
        action="store_true",
        help="also list each site a rule matched structurally but refused, with the reason and the line causing it "
        "(text: `CODE refused at path:line:col: reason (line N)`; JSON: a \"refused\" list; SARIF: note results); "
        "sites silenced by # noqa are listed too; bypasses the cache",
    )
    scan.add_argument(
        "--no-cache",
        action="store_true",
        help=f"do not reuse or store findings of unchanged files (cache: ${ENV_DIR} or ./{DEFAULT_DIR})",
    )

    rewrite = add(
        "rewrite",
        "apply the rules to files in place (or --diff / --check)",
        "Apply the rules (all by default) and write the files in place, atomically, keeping their encoding and "
        "newlines. Files that cannot be processed are reported and the others are still rewritten.",
        cmd_rewrite,
    )
    _add_file_options(rewrite, "none given means nothing to do (for pre-commit)")
    _add_rule_options(rewrite)
    rewrite.add_argument("--diff", action="store_true", help="print a unified diff instead of writing")
    rewrite.add_argument("--check", action="store_true", help="write nothing; exit 1 if some file would change")

    add("list", "list the rules", "List every rule: code, name, where its kernel's fast path runs by default, kernel "
        "target and summary.", cmd_list)

    explain = add(
        "explain",
        "explain one rule",
        "Show what a rule matches (its rule file), its preconditions, its target and an example diff generated by "
        "running it on its first fixture.",
        cmd_explain,
    )
    explain.add_argument("rule", metavar="RULE", help="rule code (ADP005) or name (FuseDropoutLN)")

    demo = add(
        "demo",
        "show the diff the rules make on a bundled example model",
        "Print the unified diff `rewrite` makes on the bundled example model "
        "(adopter_codemods/examples/bert_like.py), which holds a site of every rule: by default with the rules "
        "whose kernels take a fast path somewhere by default, with --rules all with every rule (what the AdoptAll "
        "codemod does). Nothing is written.",
        cmd_demo,
    )
    demo.add_argument("--source", action="store_true", help="print the example's source instead of the diff")
    demo.add_argument(
        "--rules",
        action="append",
        metavar="CODES",
        help="comma-separated codes or names of the rules to show ('all': every rule); default: 'fast'",
    )

    init = add(
        "init",
        f"write the LibCST codemod configuration {CONFIG_NAME} here",
        f"Write {CONFIG_NAME} into the current directory, so that `python -m libcst.tool codemod "
        "adopter_codemods.AdoptFast .` resolves the codemod names, keeps your formatting and skips virtual "
        "environments, build output, site-packages and VCS metadata. An existing file is left alone unless --force.",
        cmd_init,
    )
    init.add_argument("--force", action="store_true", help=f"overwrite an existing {CONFIG_NAME}")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"adopter-codemods: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`... | head`): no traceback, and no second error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR

"""All rules over every PyTorch ``modeling_*.py`` of the installed transformers release.

Prints findings per rule, files that failed and why, the time taken, and checks that every rewritten file still
parses and is idempotent (a second AdoptAll run changes nothing). A script, not a test:

    python benchmarks/corpus_report.py [--models-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from adopter_codemods.engine import analyse_source  # noqa: E402
from adopter_codemods.files import SourceError  # noqa: E402
from adopter_codemods.rules import builtin_rules  # noqa: E402


def corpus(models_dir: Path) -> list[Path]:
    files = sorted(models_dir.glob("*/modeling_*.py"))
    return [f for f in files if not f.name.startswith(("modeling_tf_", "modeling_flax_"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-dir", type=Path, help="default: transformers/models of the installed package")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.models_dir is None:
        import transformers

        args.models_dir = Path(transformers.__file__).parent / "models"
        version = transformers.__version__
    else:
        version = "?"
    files = corpus(args.models_dir)
    rules = builtin_rules()
    per_rule: collections.Counter[str] = collections.Counter()
    failures: list[tuple[str, str]] = []
    not_idempotent: list[str] = []
    skipped: list[str] = []  # classes / functions not analysed, with the reason
    changed = 0
    scan_time = rewrite_time = 0.0
    size = 0
    live = sys.stderr.isatty()  # one line redrawn on a terminal; in a log, a line per 50 files
    for i, path in enumerate(files, 1):
        if live:
            print(f"\r[{i}/{len(files)}] {path.parent.name:<40}", end="", file=sys.stderr, flush=True)
        elif i % 50 == 0 or i == len(files):
            print(f"[{i}/{len(files)}] {path.parent.name}", file=sys.stderr, flush=True)
        data = path.read_bytes()
        size += len(data)
        try:
            t0 = time.perf_counter()
            analysis = analyse_source(data, rules, str(path))
            findings = analysis.findings()
            t1 = time.perf_counter()
            skipped.extend(f"{s.path}:{s.line}: {s.unit}: {s.reason}" for s in analysis.skips())
            outcome = analysis.rewrite()  # the first round reuses the scan's matches
            t2 = time.perf_counter()
        except Exception as exc:  # the report lists every failure instead of stopping at the first
            failures.append((str(path), f"{type(exc).__name__}: {exc}"[:300]))
            continue
        scan_time += t1 - t0
        rewrite_time += t2 - t1
        per_rule.update(f.code for f in findings)
        if outcome.applied:
            changed += 1
            code = outcome.module.code
            try:
                again = analyse_source(code, rules, str(path)).rewrite()
            except (cst.ParserSyntaxError, SourceError) as exc:
                failures.append((str(path), f"rewritten file does not parse: {exc}"))
                continue
            if again.applied:
                not_idempotent.append(str(path))
    if live:
        print(file=sys.stderr)  # end the redrawn line
    report = {
        "transformers": version,
        "files": len(files),
        "megabytes": round(size / 1e6, 2),
        "files_rewritten": changed,
        "findings_per_rule": {r.code: per_rule.get(r.code, 0) for r in rules},
        "findings_total": sum(per_rule.values()),
        "failures": failures,
        "not_idempotent": not_idempotent,
        "skipped": skipped,
        "scan_seconds": round(scan_time, 1),
        "rewrite_seconds": round(rewrite_time, 1),
    }
    print(f"transformers {version}: {len(files)} modeling files, {report['megabytes']} MB")
    for rule in rules:
        print(f"  {rule.code} {rule.name:<24} {per_rule.get(rule.code, 0):>5} findings")
    print(f"  total {report['findings_total']} findings in {changed} rewritten files")
    print(f"scan (parse+analysis) {scan_time:.1f} s, rewrite (all rounds, the first reusing the scan's matches) {rewrite_time:.1f} s")
    print(f"failures: {len(failures)}; rewritten files that parse but change on a second run: {len(not_idempotent)}")
    print(f"classes or functions not analysed: {len(skipped)}")
    for line in skipped:
        print(f"  {line}")
    for path, why in failures:
        print(f"  {path}: {why}")
    for path in not_idempotent:
        print(f"  not idempotent: {path}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failures or not_idempotent else 0


if __name__ == "__main__":
    raise SystemExit(main())

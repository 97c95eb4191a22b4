"""Findings per rule (and per class) of selected rules over every PyTorch ``modeling_*.py`` of a transformers tree.

Each file is scanned (findings judged on the unmodified source) and rewritten with the same rules; the rewritten
file must parse and a second rewrite must change nothing. A script, not a test:

    python benchmarks/rule_counts.py --rules ADP011,ADP012,ADP013 [--models-dir DIR] [--by-class]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from adopter_codemods.api import rewrite_source, scan_source  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rules", required=True, help="comma-separated rule codes or codemod names")
    parser.add_argument("--models-dir", type=Path, help="default: transformers/models of the installed package")
    parser.add_argument("--by-class", action="store_true", help="also list the findings per file and class")
    args = parser.parse_args()
    if args.models_dir is None:
        import transformers

        args.models_dir = Path(transformers.__file__).parent / "models"
    rules = args.rules.split(",")
    files = sorted(f for f in args.models_dir.glob("*/modeling_*.py") if not f.name.startswith(("modeling_tf_", "modeling_flax_")))
    per_rule: collections.Counter[str] = collections.Counter()
    per_file: dict[str, collections.Counter[str]] = {}
    problems: list[str] = []
    for path in files:
        source = path.read_text(encoding="utf-8")
        found = scan_source(source, rules, path=str(path))
        if not found:
            continue
        per_rule.update(f.code for f in found)
        counts = collections.Counter(f"{f.code} {f.cls or '<module>'}" for f in found)
        per_file[f"{path.parent.name}/{path.name}"] = counts
        if args.by_class:  # as found, so a long run shows its progress
            print(f"  {path.parent.name}/{path.name}: " + ", ".join(f"{k} x{n}" for k, n in sorted(counts.items())), flush=True)
        code = rewrite_source(source, rules, path=str(path)).code
        cst.parse_module(code)
        if rewrite_source(code, rules).code != code:
            problems.append(f"{path}: a second rewrite changed the file")
    print(f"{len(files)} files, {len(per_file)} with findings")
    for code in rules:
        hits = sum(1 for c in per_file.values() if any(k.startswith(code.upper()) for k in c))
        print(f"{code}: {per_rule[code.upper()]} findings in {hits} files")
    for problem in problems:
        print("PROBLEM", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Analysis cost against the number of control-flow paths: a generated class whose forward has k independent
``if``s (2**k paths), each holding a softmax site (ADP004) and a dropout + add + LayerNorm site (ADP005).

Prints, per k: the paths, the graph's events, the sites found and the time to build the structure and match every
rule (best of `--repeat`). The engine walks each statement once (docs/ENGINE.md), so time grows with k, not 2**k.
A script, not a test (tests/test_flow.py checks the same class is analysed and its sites found):

    python benchmarks/bench_paths.py [--ks 4,8,16,32,64,128] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from adopter_codemods.engine import find_all  # noqa: E402
from adopter_codemods.provider import build_module_structure  # noqa: E402
from adopter_codemods.rules import builtin_rules  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from generated_sources import branchy_class  # noqa: E402


def analyse(source: str) -> tuple[int, int, float]:
    """(events, matches, seconds) for one structure build plus every rule's matching."""
    start = time.perf_counter()
    structure = build_module_structure(cst.parse_module(source))
    matches = find_all(structure, builtin_rules())
    seconds = time.perf_counter() - start
    (cls,) = structure.classes
    return sum(len(g.events) for g in cls.graphs), len(matches), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", default="4,8,16,32,64,128", help="numbers of sequential ifs (comma separated)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'k':>5} {'paths':>12} {'events':>8} {'matches':>8} {'seconds':>9} {'ms per if':>10}")
    for k in (int(x) for x in args.ks.split(",")):
        source = branchy_class(k)
        runs = [analyse(source) for _ in range(args.repeat)]
        events, matches, _ = runs[0]
        best = min(r[2] for r in runs)
        print(f"{k:>5} {'2**' + str(k):>12} {events:>8} {matches:>8} {best:>9.3f} {1000 * best / k:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

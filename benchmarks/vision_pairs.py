"""Per-model Conv->BN table for real torchvision 0.28.0 / timm 1.0.31 models (issue 11).

Copies both packages to a temporary directory, rewrites the files that define the models' module classes with
`python -m adopter_codemods rewrite`, runs original and rewritten models in float64 in fresh processes and prints,
per model: Conv->BN pairs executed, ADP007/ADP008 sites in its classes, pairs run through `conv_bn2d`, pairs that
took the folded path in eval, and whether outputs, gradients and buffers matched (tests/vision_acceptance.py says
exactly what is counted). Needs `make model-zoo`. About half a minute of CPU.

    python benchmarks/vision_pairs.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from vision_acceptance import format_table, run_acceptance  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as workdir:
        rows = run_acceptance(Path(workdir))
    print(format_table(rows))
    return 0 if all(not row.mismatches for row in rows.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""gpu_bench: vanilla models vs. the same models rewritten by adopter_codemods, timed side by side.

For each model of the suite (``gpu_bench.suite``) the model's *source* is rewritten once per applicable rule
and once with all rules; every variant is checked for equivalence against vanilla (outputs, gradients, buffers,
strict state-dict loading) and then timed (training step and inference), with ``torch.compile`` anchors.
Run ``python -m gpu_bench --help``; see ``gpu_bench/README.md``.
"""

from gpu_bench.runner import BenchConfig, run_suite

__all__ = ["BenchConfig", "run_suite"]

"""Reference models of the benchmark suite, kept as plain source files so the codemods can rewrite them.

Each file defines ``CONFIGS`` (``tiny``/``base``), ``build_model(size)``, ``example_inputs(size, batch_size)``
and a fixture-style ``make_example()``. They are read as text by ``gpu_bench.suite`` and never imported
through this package, so the vanilla and the rewritten source are executed the same way.
"""

"""``python -m gpu_bench``: see ``gpu_bench.cli``."""

from gpu_bench.cli import main

raise SystemExit(main())

"""``python -m adopter_codemods``: the command line (see :mod:`adopter_codemods.cli`)."""

from .cli import main

raise SystemExit(main())

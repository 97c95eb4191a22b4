"""Guards of the built-in rules (see :mod:`adopter_codemods.guards`). Importing this module registers them."""

from __future__ import annotations

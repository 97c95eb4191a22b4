"""Build hook of the adopter-kernels distribution: put the repository's adopter_kernels/ package into the wheel.

The package lives next to adopter_codemods at the repository root, one directory above this project. A built
wheel copies it in; an editable install must not (the copy would go stale), so there the repository root goes on
sys.path instead (``dev-mode-dirs``). An sdist holds the package at its own root, where hatch selects it itself
when a wheel is built from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class KernelsBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        if version == "editable" or (root / "adopter_kernels").is_dir():
            return
        build_data["force_include"][str(root.parent / "adopter_kernels")] = "adopter_kernels"

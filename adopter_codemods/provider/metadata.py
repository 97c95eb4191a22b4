"""The LibCST metadata provider the codemods declare in ``METADATA_DEPENDENCIES``."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import BaseMetadataProvider

from ..structure import ModuleStructure
from .build import build_module_structure


class ModelStructureProvider(BaseMetadataProvider[ModuleStructure]):
    """LibCST metadata provider: ``wrapper.resolve(ModelStructureProvider)[module]`` is the ModuleStructure.

    Computed once per file and shared by every rule that declares it in ``METADATA_DEPENDENCIES``. A provider gets
    no file path, so bases imported from other files are judged by name only; the codemods build the structure
    with ``context.filename`` instead.
    """

    def _gen_impl(self, module: cst.Module) -> None:
        self.set_metadata(module, build_module_structure(module))

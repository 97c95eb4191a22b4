"""Whether a rewrite takes a file that is written for TorchScript out of it.

Most kernels the rules call take modules (or Python callables) as arguments, which ``torch.jit.script`` cannot
compile (docs/COMPILE_AND_TRACE.md, per rule): a model that scripted before its rewrite fails to compile after it.
The tool cannot know whether a model gets scripted (fairseq and open_clip script models built from other files),
but a file that uses TorchScript's own API says its code is meant to be: `script_conflict` names the first such use
and the kernels a rewrite added that TorchScript cannot compile, so the front-ends can say so where they rewrite.
Other files get one note per run (`added_unscriptable`): their models may be scripted from elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst
from libcst.metadata import PositionProvider

from . import cstwalk
from .qualnames import ImportTable

PACKAGE = "adopter_kernels"
# The kernels whose calls compile under torch.jit.script (the scripted model then runs the original computation):
# ADP004's softmax drop-ins, typed like the APIs they replace, and ADP005's module form.
SCRIPTABLE = frozenset({"softmax", "torch_softmax", "tensor_softmax", "FusedDropoutAddLayerNorm"})
# TorchScript's API: using any of it says the file's code is meant to compile under torch.jit.script.
_MARKERS = frozenset({
    "torch.jit.script", "torch.jit.script_method", "torch.jit.Final", "torch.jit.is_scripting", "torch.jit.export",
    "torch.jit.ignore", "torch.jit.unused", "torch.jit.interface", "torch.jit.annotate", "torch.jit.Attribute",
    "torch.jit._overload_method",
})


@dataclass(frozen=True)
class ScriptConflict:
    """A file using TorchScript's API (`marker`, at `line`) into which a rewrite put calls of `kernels`."""

    marker: str
    line: int
    kernels: tuple[str, ...]


def added_unscriptable(original: cst.Module, rewritten: cst.Module) -> tuple[str, ...]:
    """The `adopter_kernels.<name>` the rewrite added calls of that TorchScript cannot compile, sorted."""
    return tuple(sorted(_unscriptable_kernels(rewritten) - _unscriptable_kernels(original)))


def script_conflict(original: cst.Module, added: tuple[str, ...]) -> Optional[ScriptConflict]:
    """The conflict, if the rewrite added calls of unscriptable kernels (`added_unscriptable`) to a file that uses
    TorchScript's API."""
    if not added:
        return None
    marker = _first_marker(original)
    if marker is None:
        return None
    return ScriptConflict(marker[0], marker[1], added)


def _unscriptable_kernels(module: cst.Module) -> set[str]:
    """The `adopter_kernels.<name>` the module refers to that TorchScript cannot compile."""
    out = set()
    for node in cstwalk.walk(module):
        if (
            type(node) is cst.Attribute
            and type(node.value) is cst.Name  # type: ignore[attr-defined]
            and node.value.value == PACKAGE  # type: ignore[attr-defined]
            and node.attr.value not in SCRIPTABLE  # type: ignore[attr-defined]
        ):
            out.add(node.attr.value)  # type: ignore[attr-defined]
    return out


def _first_marker(module: cst.Module) -> Optional[tuple[str, int]]:
    """The first use of TorchScript's API in the module (``__constants__`` too), as written, with its line."""
    table = ImportTable.from_module(module)
    found: Optional[tuple[str, cst.CSTNode]] = None
    for node in cstwalk.walk(module):
        kind = type(node)
        if kind is cst.Name and node.value == "__constants__":  # type: ignore[attr-defined]
            found = ("__constants__", node)
        elif kind in (cst.Name, cst.Attribute):
            resolved = table.resolve(node)  # type: ignore[arg-type]
            if resolved is not None and resolved in _MARKERS:
                found = (cst.Module([]).code_for_node(node), node)
        if found is not None:
            break
    if found is None:
        return None
    line = cst.MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)[found[1]]
    return found[0], line.start.line

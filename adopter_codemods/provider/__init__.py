"""The model-structure provider: per ``nn.Module`` class, the ``__init__`` bindings and the ``forward`` graph (paper §3.2).

Computed once per file (a LibCST metadata provider keyed on the Module node) and shared by every rule, codemod,
lint rule and ``scan``. The walk is a plain recursive descent over the CST, not scope analysis:

* nn.Module classes are those deriving from ``torch.nn.Module`` (or ``Sequential``/``ModuleList``/``ModuleDict``),
  named through the import table, through classes in the same file, or through classes of other files, which
  ``class_bases`` resolves statically from the file's path (a base it cannot find counts only when named
  ``*PreTrainedModel`` or ``modeling_layers.GradientCheckpointingLayer``);
* ``__init__``: every ``self.<attr> = <value>`` (also under ``if``), ``nn.Sequential(...)`` elements included;
* ``forward``: its control-flow graph (adopter_codemods/flow/graph.py: if/elif/else, early return/raise, loops
  unrolled to no, one and two copies of the body, try/with bodies, match cases; values numbered SSA style, phis at
  joins), with calls to ``self`` helper methods inlined (recursion-safe) and nested calls and tensor ops unchained
  into temporaries. Each statement is walked once per loop-body copy and inlining, whatever the number of paths.
  Compound statements holding no layer, function or helper call are folded into one opaque event;
* the class's other methods not inlined into ``forward`` (``_attn`` called with ``*args``, ``generate``, ...) are
  walked the same way, each on its own, and so are the module's top-level functions (one unnamed unit, no
  layers): a rewrite inside them is as local as one inside ``forward``. Functions compiled by a decorator
  (``torch.jit.script``) and async ones are left alone.

Layout, one file per concern:

* ``syntax.py``: CST predicates shared by the others (names read and written, literals, ``self.<attr>``);
* ``discovery.py``: which classes are nn.Module classes, their local bases and families, the per-class scans;
* ``state.py``: the walk's partial paths, value numbering and joins;
* ``walk.py``: the statement walk of forward and the other functions into ``flow.graph.FlowGraph``, and the
  ``__init__`` bindings (through adopter_codemods/init_bindings.py);
* ``unchain.py``: expression unchaining, ``nn.Sequential`` calls and helper inlining;
* ``build.py``: ``build_module_structure``, tying them together per file;
* ``metadata.py``: ``ModelStructureProvider``, the LibCST metadata provider.
"""

from __future__ import annotations

from .build import build_module_structure
from .metadata import ModelStructureProvider
from .syntax import TENSOR_METHODS, _const_text, _written_names, simple_condition
from .walk import _ClassWalker

__all__ = [
    "TENSOR_METHODS",
    "ModelStructureProvider",
    "_ClassWalker",
    "_const_text",
    "_written_names",
    "build_module_structure",
    "simple_condition",
]

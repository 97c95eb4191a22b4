"""Where the acceptance tests find real model sources that are not project dependencies.

``make test`` (target ``model-zoo``) installs them with pip ``--target`` under ``.cache/``:

- ``TRANSFORMERS5_DIR``: transformers 5.x with the huggingface-hub/tokenizers it needs. The pinned transformers
  4.34.1 cannot share a process with those, so tests run 5.x code in a subprocess whose PYTHONPATH starts with
  ``transformers5_pythonpath()``.
- ``VISION_DIR``: torchvision and timm, importable in this process through ``import_vision()``.
- ``VIT_PYTORCH_DIR``: vit-pytorch and einops (tests/test_vit_pytorch_rewrites.py runs them in a subprocess).
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRANSFORMERS5 = "5.23.0"
TRANSFORMERS5_DIR = ROOT / ".cache" / f"transformers-{TRANSFORMERS5}"
VISION_DIR = ROOT / ".cache" / "vision-models"
VIT_PYTORCH_DIR = ROOT / ".cache" / "vit-pytorch"


def require(directory: Path) -> None:
    """Fail (not skip) when `make model-zoo` has not run: a skipped acceptance test would pass unnoticed."""
    if not directory.is_dir():
        pytest.fail(f"{directory} is missing: run `make model-zoo` (part of `make test`)")


def transformers5_pythonpath() -> str:
    require(TRANSFORMERS5_DIR)
    return os.pathsep.join([str(TRANSFORMERS5_DIR), str(ROOT)])


def import_vision(directory: Path = VISION_DIR) -> tuple[types.ModuleType, types.ModuleType]:
    """``(torchvision, timm)`` from ``directory`` (``VISION_DIR``, or a rewritten copy in a fresh process).

    torchvision's wheel is built against a CUDA torch, so its compiled operators do not load on the CPU wheel and
    its meta-kernel registrations for them fail at import. The model code needs neither (detection ops aside), so
    that registration module is replaced by an empty one before the import.
    """
    require(directory)
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import timm
    import torchvision

    return torchvision, timm

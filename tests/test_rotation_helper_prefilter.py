"""ADP013's per-file test renders and parses only the small functions that read every attribute of some rotation
template (structural_guards._names_template_attributes): a necessary condition of a match, since the canonical
form a helper is compared in renames variables but never attributes."""

from __future__ import annotations

import libcst as cst
import pytest

from adopter_codemods import files
from adopter_codemods.structural_guards import (
    ROTATE_EVERY_TWO_TEMPLATES,
    ROTATE_HALF_TEMPLATES,
    _names_template_attributes,
    _parsed,
)


def _function(source: str) -> cst.FunctionDef:
    fn = cst.parse_module(source.strip() + "\n").body[0]
    assert isinstance(fn, cst.FunctionDef)
    return fn


@pytest.mark.parametrize("template", ROTATE_HALF_TEMPLATES + ROTATE_EVERY_TWO_TEMPLATES)
def test_every_template_passes(template: str) -> None:
    assert _names_template_attributes(_function(template))


def test_renamed_rotation_is_still_found() -> None:
    source = (
        "import torch as th\n\n\ndef swap(t):\n    a = t[..., : t.shape[-1] // 2]\n    b = t[..., t.shape[-1] // 2 :]\n"
        "    return th.cat((-b, a), dim=-1)\n\n\ndef other(t):\n    return t.flip(-1)\n"
    )
    module = cst.parse_module(source)
    with files.analysing(module, source.encode()):
        assert _parsed(module).rotation_helpers() == {"swap"}
    assert not _names_template_attributes(_function("def other(t):\n    return t.flip(-1)\n"))

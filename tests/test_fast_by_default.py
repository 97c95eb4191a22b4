"""Each built-in rule's `fast "..."` header (shown by `list` and `explain`) says where its kernels' fast paths run by
default; this keeps it in step with the dispatch of adopter_kernels (docs/KERNEL_PERFORMANCE.md)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from adopter_codemods.rules import builtin_rules  # noqa: E402
from adopter_kernels import _dispatch  # noqa: E402
from adopter_kernels._dispatch import Call  # noqa: E402


def _fast_on(code: str) -> set[str]:
    """The devices where `auto` takes a fast backend of the rule's kernels for some float32/bfloat16 call, by the
    backends' `faster` and `supports` predicates (whether triton or xformers is installed here aside)."""
    kernels = [k for k in _dispatch._KERNELS.values() if k.doc.split()[0] == code]
    assert kernels, code
    devices = set()
    for kernel in kernels:
        for device in ("cpu", "cuda"):
            for dtype in (torch.float32, torch.bfloat16):
                for grad in (False, True):
                    call = Call(device, dtype, grad, None)
                    if any(b.name != "reference" and b.faster(call) and b.supports(call) for b in kernel.backends):
                        devices.add(device)
    return devices


@pytest.mark.parametrize("rule", builtin_rules(), ids=lambda r: r.code)
def test_fast_header_matches_the_dispatch(rule) -> None:  # type: ignore[no-untyped-def]
    assert rule.fast, f"{rule.code} has no `fast` header"
    fast = _fast_on(rule.code)
    if rule.fast == "none":
        assert fast == set()
    else:
        assert fast == {device for device in ("cpu", "cuda") if device.upper() in rule.fast}, rule.fast

"""Pickling the classes the kernels make at run time.

ADP011's fused RMSNorm classes (``rms_norm_module``) and the attention rules' SDPA subclasses (``*_attention_sdpa``)
are made by a cached factory from the model's own class, so pickle cannot find them by name. Their instances reduce
to that factory and its arguments instead (the model's class is pickled by reference, as the original model's is):
``torch.save(model)`` of a whole rewritten model, and loading it where the model's module imports, work as for the
original model.
"""

from __future__ import annotations

from typing import Any, Callable, SupportsIndex


def reduce_through(factory: Callable[..., type], args: tuple[Any, ...]) -> Callable[[Any, SupportsIndex], Any]:
    """A ``__reduce_ex__`` for the class ``factory(*args)`` returns: the instance's state as ``object`` reduces it,
    the class as the factory call."""

    def __reduce_ex__(self: Any, protocol: SupportsIndex) -> Any:
        return (new_instance, (factory, args), *object.__reduce_ex__(self, protocol)[2:])

    return __reduce_ex__


def new_instance(factory: Callable[..., type], args: tuple[Any, ...]) -> Any:
    """An instance of ``factory(*args)``, not initialised (pickle sets its state next, as for any module)."""
    made = factory(*args)
    return object.__new__(made)  # as copyreg.__newobj__ makes an nn.Module (object's __new__)

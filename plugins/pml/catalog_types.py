"""The records of the PML catalogue (:mod:`.catalog`): one exposed class and one of its arguments (no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class _Pml:
    def __repr__(self) -> str:
        return "PML"


#: :attr:`Arg.default` when the recipe default is PML's own (read from its signature).
PML: Any = _Pml()

#: Arguments no catalogued class exposes, left at PML's default: argument -> why.
KEPT_EVERYWHERE: dict[str, str] = {
    "collect_stats": "statistics collection is switched on at run start by the record_keeper logger",
    "is_inverted": "fixed by each distance class (similarity or distance)",
    "weight_init_func": "PML's weight initialisation; a function is no recipe value",
    "mat_based_loss": "fixed by each GenericPairLoss subclass",
    "aggregation_func": "PerAnchorReducer's per-anchor mean; a function is no recipe value",
}


@dataclass(frozen=True)
class Arg:
    """One constructor argument a recipe may set.

    Attributes:
        name: Argument name, identical in PML's constructor and in the recipe.
        type: Python type of the recipe value (PML's defaults cannot tell ``float`` from ``int``, nor list choices).
        description: One line for ``dmlplug list --params`` and the docs.
        default: Recipe default: :data:`PML` (PML's own default) unless PML has none or it differs on purpose.
        stands_for: The PML argument a recipe-only argument decides (``per_class_beta`` passes ``num_classes``
            from the context when true), or ``""`` for a PML argument of this name.
    """

    name: str
    type: Any
    description: str
    default: Any = PML
    stands_for: str = ""


@dataclass(frozen=True)
class PmlClass:
    """A PML class registered under a recipe name.

    Attributes:
        cls: Class name inside its PML sub-module (``losses``, ``miners`` ...).
        name: Registered recipe name.
        description: One line shown by ``dmlplug list``.
        args: Recipe-settable constructor arguments.
        aliases: Other recipe names (always includes the mechanical snake_case of the class name
            when it differs from ``name``).
        from_ctx: Constructor argument -> :class:`~dmlplug.context.BuildContext` field it is read from.
        keep: Constructor arguments left at PML's default -> why (besides :data:`KEPT_EVERYWHERE`).
        tags: Capability tags (vocabulary: docs/plugin-api.md).
        requires: Capabilities needed from the rest of the recipe.
        adapter: Name of a class in :mod:`dmlplug_builtins.pml.adapters` that wraps the PML object to fit
            the ``loss(embeddings, labels, indices_tuple)`` convention, or ``""``.
    """

    cls: str
    name: str
    description: str
    args: tuple[Arg, ...] = ()
    aliases: tuple[str, ...] = ()
    from_ctx: dict[str, str] = field(default_factory=dict)
    keep: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    adapter: str = ""

    def kept(self, argument: str) -> bool:
        """Whether ``argument`` is left at PML's default."""
        return argument in self.keep or argument in KEPT_EVERYWHERE

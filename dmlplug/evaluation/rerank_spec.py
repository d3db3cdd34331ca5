"""Which re-ranker to run, with which parameters: one parser for recipes, ``dmlplug.evaluate`` and ``dmlplug search``.

A spec is written ``"aqe"``, ``"aqe:n=3,alpha=2"`` (the ``--rerank`` form of ``dmlplug search``) or as a table
``{name = "aqe", n = 3, alpha = 2}`` (``[evaluation] rerank``); every form gives the same :class:`RerankSpec`: the
validated table of a registered re-ranker (kind ``rerankers``: ``dmlplug list rerankers --params``) and the label
its metrics are suffixed with. The name and the parameters are checked by the registry the caller works with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dmlplug.errors import ComponentError, RecipeError
from dmlplug.tables import ComponentTable, table_from_text, validate_table

if TYPE_CHECKING:
    from dmlplug.protocols import Reranker
    from dmlplug.registry import Registry

EXAMPLE_CLI = "aqe, aqe:n=3,alpha=2, dba:n=5 or krnn:k1=20,k2=6,lambda=0.3,shortlist=100"
EXAMPLE_TOML = 'rerank = [{name = "aqe", n = 3, alpha = 2}, {name = "krnn"}]'


@dataclass(frozen=True)
class RerankSpec:
    """A validated re-ranker with all its parameters (defaults filled in) and its label.

    Attributes:
        table: The validated table of kind ``rerankers`` (registry entry and Params).
        label: What the metrics of this method are suffixed with (``recall@1+label``); the name by default.
    """

    table: ComponentTable
    label: str

    @property
    def name(self) -> str:
        """The re-ranker's registered name."""
        return self.table.name

    def describe(self) -> str:
        """``name:k=v,...`` with every parameter, e.g. for a log line."""
        params = self.table.to_dict(mode="python")
        del params["name"]
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in params.items())

    def build(self) -> Reranker:
        """The re-ranker (a re-ranker needs nothing from a run: the context is a bare one)."""
        from dmlplug.context import BuildContext

        reranker: Reranker = self.table.build(BuildContext())
        return reranker


def parse_rerank(value: Any, where: str = "rerank", *, registry: Registry) -> RerankSpec:
    """A :class:`RerankSpec` from a name, a ``name:k=v,...`` string or a ``{name = ..., k = v}`` table.

    ``label`` is a key of the spec, not a parameter of the re-ranker.

    Args:
        value: The spec (a :class:`RerankSpec` is returned as it is).
        where: The recipe key or option, for messages.
        registry: Where the name is looked up.

    Raises:
        ComponentError: Unknown re-ranker (with the names it may mean), or no name.
        RecipeError: Unknown parameter, a value of the wrong type or out of range, a bad label (what, where, fix).
    """
    if isinstance(value, RerankSpec):
        return value
    if isinstance(value, str):
        table = table_from_text(value, where=where, example=EXAMPLE_CLI)
    elif isinstance(value, Mapping):
        table = dict(value)
    else:
        raise RecipeError(f"a re-ranking method is a name or a table, got {value!r}", where=where,
                          fix=f"write it as {EXAMPLE_TOML}")
    label = table.pop("label", None)
    try:
        validated = validate_table("rerankers", table, where=where, registry=registry)
    except ComponentError as exc:
        if exc.where is None:  # the registry's unknown-name error does not know where the name was written
            exc.set_where(where)
        raise
    label = validated.name if label is None else label
    if not isinstance(label, str) or not label or any(c in label for c in " +@/,:="):
        raise RecipeError(f"label {label!r} must be a non-empty word (none of ' +@/,:=')", where=where,
                          fix='e.g. label = "aqe3"')
    return RerankSpec(validated, label)


def parse_rerank_list(value: Any, where: str = "rerank", *, registry: Registry) -> list[RerankSpec]:
    """Specs from one spec or a list of them; labels must differ (they name the metrics).

    Raises:
        ComponentError: A re-ranker is unknown.
        RecipeError: A spec is invalid, or two have the same label.
    """
    items = value if isinstance(value, list | tuple) else [value]
    specs = [parse_rerank(item, f"{where}[{i}]", registry=registry) for i, item in enumerate(items)]
    seen: set[str] = set()
    for spec in specs:
        if spec.label in seen:
            raise RecipeError(f"two re-ranking methods are labelled {spec.label!r}: their metrics would collide",
                              where=where, fix='give one a label, e.g. {name = "aqe", n = 10, label = "aqe10"}')
        seen.add(spec.label)
    return specs

"""Which re-ranking method to run, with which parameters: one parser for the recipe and the command line.

A spec is written ``"aqe"``, ``"aqe:n=3,alpha=2"`` (the ``--rerank`` form of ``dmlplug search``) or as a table
``{name = "aqe", n = 3, alpha = 2}`` (``[evaluation] rerank``); every form gives the same :class:`RerankSpec`.
The methods are defined in docs/reranking.md and implemented in :mod:`dmlplug.evaluation.reranking`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dmlplug.errors import RecipeError, did_you_mean

#: Parameters of each method: ``name -> (default, kind, lowest value, highest value or None)``.
RERANK_METHODS: dict[str, dict[str, tuple[float, type, float, float | None]]] = {
    # Radenović et al.: weights (q·d)^alpha over the query's n nearest gallery items.
    "aqe": {"n": (5, int, 1, None), "alpha": (3.0, float, 0.0, None)},
    # The same weighting applied to each gallery item's n nearest gallery items.
    "dba": {"n": (5, int, 1, None), "alpha": (3.0, float, 0.0, None)},
    # Zhong et al.'s defaults k1 = 20, k2 = 6, lambda = 0.3; shortlist = how many candidates are re-ranked.
    "krnn": {"k1": (20, int, 1, None), "k2": (6, int, 1, None), "lambda": (0.3, float, 0.0, 1.0),
             "shortlist": (100, int, 2, None)},
}

#: One line per method for help texts and messages.
SUMMARY = ("aqe (query expansion: n, alpha), dba (database-side augmentation: n, alpha), "
           "krnn (k-reciprocal: k1, k2, lambda, shortlist)")

EXAMPLE_CLI = "aqe, aqe:n=3,alpha=2, dba:n=5 or krnn:k1=20,k2=6,lambda=0.3,shortlist=100"
EXAMPLE_TOML = 'rerank = [{name = "aqe", n = 3, alpha = 2}, {name = "krnn"}]'


@dataclass(frozen=True)
class RerankSpec:
    """A validated re-ranking method with all its parameters (defaults filled in).

    Attributes:
        name: ``aqe``, ``dba`` or ``krnn``.
        params: Every parameter of the method (see :data:`RERANK_METHODS`).
        label: What the metrics of this method are suffixed with (``recall@1+label``); the name by default.
    """

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def describe(self) -> str:
        """``name:k=v,...`` with every parameter, e.g. for a log line."""
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in self.params.items())


def parse_rerank(value: Any, where: str = "rerank") -> RerankSpec:
    """A :class:`RerankSpec` from a name, a ``name:k=v,...`` string or a ``{name = ..., k = v}`` table.

    Raises:
        RecipeError: Unknown method or parameter, a value of the wrong type or out of range (what, where, fix).
    """
    if isinstance(value, RerankSpec):
        return value
    if isinstance(value, str):
        name, _, rest = value.strip().partition(":")
        raw: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in rest.split(","))):
            key, eq, text = item.partition("=")
            if not eq or not key.strip():
                raise RecipeError(f"{value!r}: {item!r} is not key=value", where=where,
                                  fix=f"write the method as {EXAMPLE_CLI}")
            raw[key.strip()] = text.strip()
        return _checked(name.strip(), raw, raw.pop("label", name.strip()), where, from_text=True)
    if isinstance(value, dict):
        table = dict(value)
        name = table.pop("name", None)
        if not isinstance(name, str):
            raise RecipeError(f"a re-ranking table needs a name, got {value!r}", where=where,
                              fix=f"write it as {EXAMPLE_TOML}")
        return _checked(name, table, table.pop("label", name), where, from_text=False)
    raise RecipeError(f"a re-ranking method is a name or a table, got {value!r}", where=where,
                      fix=f"write it as {EXAMPLE_TOML}")


def parse_rerank_list(value: Any, where: str = "rerank") -> list[RerankSpec]:
    """Specs from one spec or a list of them; labels must differ (they name the metrics).

    Raises:
        RecipeError: A spec is invalid, or two have the same label.
    """
    items = value if isinstance(value, list | tuple) else [value]
    specs = [parse_rerank(item, where=f"{where}[{i}]") for i, item in enumerate(items)]
    seen: set[str] = set()
    for spec in specs:
        if spec.label in seen:
            raise RecipeError(f"two re-ranking methods are labelled {spec.label!r}: their metrics would collide",
                              where=where, fix='give one a label, e.g. {name = "aqe", n = 10, label = "aqe10"}')
        seen.add(spec.label)
    return specs


def _checked(name: str, raw: dict[str, Any], label: Any, where: str, *, from_text: bool) -> RerankSpec:
    if not isinstance(label, str) or not label or any(c in label for c in " +@/,:="):
        raise RecipeError(f"label {label!r} must be a non-empty word (none of ' +@/,:=')", where=where,
                          fix='e.g. label = "aqe3"')
    if name not in RERANK_METHODS:
        raise RecipeError(f"unknown re-ranking method {name!r}{did_you_mean(name, RERANK_METHODS)}", where=where,
                          fix=f"use one of: {SUMMARY}")
    allowed = RERANK_METHODS[name]
    params: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in allowed:
            raise RecipeError(f"{name} has no parameter {key!r}{did_you_mean(key, allowed)}", where=where,
                              fix=f"{name} takes: {', '.join(allowed)}")
        params[key] = _value(name, key, value, allowed[key], where, from_text)
    full = {key: params.get(key, spec[1](spec[0])) for key, spec in allowed.items()}
    return RerankSpec(name=name, params=full, label=label)


def _value(name: str, key: str, value: Any, spec: tuple[float, type, float, float | None], where: str,
           from_text: bool) -> Any:
    _, kind, low, high = spec
    try:
        if isinstance(value, bool):
            raise ValueError
        if kind is int:
            number: Any = int(value) if from_text else value
            if not isinstance(number, int) or (not from_text and float(value) != number):
                raise ValueError
        else:
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
    except (TypeError, ValueError):
        raise RecipeError(f"{name} {key} must be {'an integer' if kind is int else 'a number'}, got {value!r}",
                          where=where, fix=f"e.g. {key}={spec[0]}") from None
    if number < low or (high is not None and number > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise RecipeError(f"{name} {key} must be {bound}, got {value!r}", where=where, fix=f"e.g. {key}={spec[0]}")
    return number

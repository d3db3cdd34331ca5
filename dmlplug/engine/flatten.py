"""One way to flatten a resolved recipe into ``{"section.key": value}`` pairs (torch-free).

Used wherever recipes are compared or shown key by key: the resume check (:func:`dmlplug.engine.resume.recipe_diff`),
``RunView.flat_recipe`` (TensorBoard's HParams), ``dmlplug report``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten_recipe(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested recipe values as ``{"section.key": value}``; values are kept as they are.

    Tables become dotted keys (``"data.dataset.name"``), arrays of tables indexed keys
    (``"regularizers[0].weight"``); any other value, arrays of numbers or strings included, is one entry.

    Example::

        flatten_recipe({"run": {"epochs": 2}, "evaluators": [{"name": "recall", "k": [1, 2]}]})
        # {"run.epochs": 2, "evaluators[0].name": "recall", "evaluators[0].k": [1, 2]}
    """
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_recipe(value, name + "."))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for i, item in enumerate(value):
                flat.update(flatten_recipe(item, f"{name}[{i}]."))
        else:
            flat[name] = value
    return flat

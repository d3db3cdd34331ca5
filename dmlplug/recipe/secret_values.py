"""Credentials have no place in a recipe: a run keeps its recipe in files that travel.

The resolved recipe is written to ``recipe.resolved.toml`` and into every checkpoint (resume rebuilds the run
from it), copied into reports and handed to trackers; a password in one of its values would be in all of them.
``dmlplug validate`` (and every run, which validates first) refuses such a recipe and names the environment
variables that carry the credential instead. What counts as a credential is :mod:`dmlplug.secrets`' rule, the
one the masking of records uses: a URL's password, or a value under a key that names a password, token, secret
or API key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from dmlplug.errors import RecipeError
from dmlplug.secrets import mask_values

#: Where a credential goes instead, for the message.
FIX = ("take the password out of the recipe and give it in the environment of the process that needs it "
       "(MLflow: MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD; W&B: WANDB_API_KEY; PostgreSQL: PGPASSWORD "
       "or ~/.pgpass), docs/monitoring.md, \"Credentials\"")


def credential_keys(recipe: Mapping[str, Any]) -> list[str]:
    """The dotted keys of ``recipe`` (a parsed TOML document) whose value holds a credential, in file order."""
    return [key for key, value in _leaves(recipe, "") if mask_values({key: value}) != {key: value}]


def refuse_credentials(recipe: Mapping[str, Any], source: str) -> None:
    """Raise when ``recipe`` holds a credential (the message names the keys, never the values).

    Raises:
        RecipeError: One or more values hold a credential.
    """
    keys = credential_keys(recipe)
    if keys:
        raise RecipeError(f"the recipe holds a credential in {', '.join(keys)}: the run directory, every checkpoint, "
                          "reports and trackers would keep it", where=source, fix=FIX)


def _leaves(value: Any, key: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for name, item in value.items():
            yield from _leaves(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{key}[{i}]")
    else:
        yield key, value

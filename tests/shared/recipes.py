"""``load_recipe`` in the process-wide plugin host's registry, as ``dmlplug validate`` loads recipes.

The library function takes the registry explicitly; tests that do not care which one pass through here.
"""

from __future__ import annotations

from typing import Any

from dmlplug.plugins import get_host
from dmlplug.recipe import load_recipe as _load_recipe


def load_recipe(source: Any, overrides: Any = None, *, registry: Any = None, environ: Any = None) -> Any:
    """:func:`dmlplug.recipe.load_recipe` with ``registry`` defaulting to the process-wide host's."""
    return _load_recipe(source, overrides, registry=registry or get_host().registry, environ=environ)

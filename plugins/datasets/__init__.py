"""Built-in datasets; each sub-module registers its datasets through ``register_into(register)``."""

from __future__ import annotations

import importlib

from dmlplug import hookimpl

# One module per on-disk layout; keeps each loader small and separately testable.
_DATASET_MODULES = ("glyphs", "cub200", "cars196", "sop", "inaturalist", "folder", "csv_list")


@hookimpl
def register_datasets(register):
    """Register the embedded glyph dataset and the loaders for the standard benchmarks."""
    for name in _DATASET_MODULES:
        importlib.import_module(f"{__name__}.{name}").register_into(register)

"""docs/components.md is what docs/generate_components.py generates from the registry."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "generate_components.py"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_components", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_components_doc_is_fresh():
    generator = _generator()
    expected = generator.render()
    current = generator.OUTPUT.read_text() if generator.OUTPUT.exists() else ""
    assert current == expected, f"docs/components.md is stale; regenerate it with: {generator.REGENERATE}"


def test_components_doc_lists_every_parameter():
    generator = _generator()
    text = generator.render()
    for needle in ("### `arcface`", "| `margin` | float | 28.6 |", "### `distance_weighted`",
                   "## Distances", "### `cosine_similarity`", "## Reducers", "| `reducer` | reducer table \\| None |",
                   "#### `sparse_centers`", "### `m_per_class`", "| `loss` | loss table |",
                   "| `distance` | distance table \\| None | none |"):
        assert needle in text, needle

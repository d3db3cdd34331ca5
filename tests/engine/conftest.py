import pytest
from e2e import TINY_RECIPE


@pytest.fixture
def tiny_recipe(tmp_path):
    """Write a seconds-long glyph recipe and return its path."""
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_RECIPE)
    return path

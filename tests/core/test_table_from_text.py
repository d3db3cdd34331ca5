"""``name:key=value,...`` specs of the command line read as component tables."""

from __future__ import annotations

import pytest

from dmlplug.errors import ComponentError
from dmlplug.tables import table_from_text


def test_values_are_read_as_toml_else_as_words():
    assert table_from_text("aqe", where="--rerank", example="aqe") == {"name": "aqe"}
    assert table_from_text(" krnn:k1=20, lambda=0.3,label=k20 ", where="--rerank", example="aqe") == \
        {"name": "krnn", "k1": 20, "lambda": 0.3, "label": "k20"}


@pytest.mark.parametrize("text", ["aqe:n", "aqe:=3", ":n=3", ""])
def test_a_malformed_spec_names_the_option_and_an_example(text):
    with pytest.raises(ComponentError) as caught:
        table_from_text(text, where="--rerank", example="aqe:n=3")
    assert caught.value.where == "--rerank" and "aqe:n=3" in (caught.value.fix or "")

"""A Params field may not take the name of a Params method (the host would call the field instead)."""

from __future__ import annotations

import warnings

import pytest

from dmlplug import Params


def test_a_field_named_like_a_declaration_is_refused_when_the_class_is_defined():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic's own shadowing warning comes first
        with pytest.raises(TypeError, match="per_class_in_batch would replace the Params method"):
            class Shadowing(Params):
                per_class_in_batch: int = 4


def test_other_fields_are_fine():
    class Fine(Params):
        m: int = 4

    assert Fine().per_class_in_batch() is None

"""`dmlplug list`: every kind a recipe can name, one component in full, wildcards and parameter types."""

from __future__ import annotations

import fnmatch
import re
from typing import Annotated, Literal

import pytest
from pydantic import Field

from dmlplug import ComponentTable, Params, TableOf
from dmlplug.cli import main
from dmlplug.errors import RecipeError
from dmlplug.listing import type_name
from dmlplug.plugins import get_host
from dmlplug.protocols.kinds import KINDS


def run_list(capsys, *args):
    """Run `dmlplug list ARGS` in-process; returns (exit code, stdout, stderr)."""
    code = 0
    try:
        main(["list", *args])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def listed_names(text: str, kind: str) -> list[str]:
    """The component names under the `<kind>:` header of `dmlplug list` output."""
    block = text.split(f"{kind}:\n", 1)[1]
    names = []
    for line in block.splitlines():
        if not line.startswith("  "):
            break
        if not line.startswith("      "):
            names.append(line.split()[0])
    return names


@pytest.mark.parametrize(("kind", "expected"), [
    ("distances", {"cosine_similarity", "dot_product_similarity", "lp_distance", "snr_distance"}),
    ("reducers", {"avg_non_zero", "class_weighted", "divisor", "do_nothing", "mean", "multiple", "per_anchor",
                  "sum", "threshold"}),
])
def test_distances_and_reducers_are_listed(capsys, kind, expected):
    code, out, err = run_list(capsys, kind)
    assert code == 0, err
    assert set(listed_names(out, kind)) == expected
    code, singular_out, _ = run_list(capsys, kind[:-1])
    assert code == 0 and singular_out == out


@pytest.mark.parametrize(("kind", "field"), [("distances", "distance"), ("reducers", "reducer")])
def test_listed_nested_names_are_exactly_those_a_recipe_accepts(capsys, kind, field):
    """Every listed name validates as a nested table of a loss; a name that is not listed does not."""
    _, out, _ = run_list(capsys, kind)
    registry = get_host().registry
    contrastive = registry.get("losses", "contrastive")
    for name in listed_names(out, kind):
        contrastive.validate({field: {"name": name}}, where="loss", registry=registry)
    with pytest.raises(RecipeError):
        contrastive.validate({field: {"name": "not_a_" + field}}, where="loss", registry=registry)


def test_listing_everything_covers_every_kind(capsys):
    code, out, _ = run_list(capsys)
    assert code == 0
    headers = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headers == list(KINDS)
    assert "distances" in headers and "reducers" in headers


def test_one_component_in_full(capsys):
    code, out, err = run_list(capsys, "losses", "arcface")
    assert code == 0, err
    info = get_host().registry.get("losses", "arcface")
    assert out.startswith("losses.arcface\n")
    assert f"description: {info.description}" in out and "plugin:      pml" in out
    assert "tags:        " + ", ".join(sorted(info.tags)) in out and "requires:" in out
    for name, field in info.params.model_fields.items():
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"{name} = "))
        assert re.search(r"\(\w", line) and (field.description or "") in line, line
    assert "margin = 28.6  (float)" in out
    # by alias and by singular kind, the same entry
    assert run_list(capsys, "loss", "arc_face")[1] == out


def test_one_nested_component_in_full(capsys):
    code, out, err = run_list(capsys, "distances", "cosine")
    assert code == 0, err
    assert out.startswith("distances.cosine_similarity\n")
    assert "aliases:     cosine" in out and "power = 1.0  (float)" in out and "plugin:      pml" in out
    # a nested table's parameters are listed like any other: a composite reducer holds reducer tables
    code, out, err = run_list(capsys, "reducer", "multiple", "--params")
    assert code == 0, err
    assert "reducers = {}  (dict[str, reducer table])" in out
    assert "default_reducer = None  (reducer table | None)" in out


@pytest.mark.parametrize(("args", "needle"), [
    (("losses", "arcfce"), "did you mean 'arcface'"),
    (("distances", "cosin"), "did you mean 'cosine'"),
    (("distancs",), "did you mean 'distances'"),
])
def test_unknown_names_are_user_errors(capsys, args, needle):
    code, _, err = run_list(capsys, *args)
    assert code == 2 and err.startswith("error: ") and needle in err, err


def test_wildcards_filter_like_timm_list_models(capsys):
    registry = get_host().registry
    code, out, _ = run_list(capsys, "losses", "*proxy*")
    assert code == 0
    expected = [n for n in registry.names("losses") if fnmatch.fnmatch(n, "*proxy*")]
    assert expected and listed_names(out, "losses") == expected
    # a wildcard alone searches every kind and shows only the kinds with a match
    code, out, _ = run_list(capsys, "*similarity*")
    assert code == 0
    assert "multi_similarity" in listed_names(out, "losses") and "multi_similarity" in listed_names(out, "miners")
    assert "cosine_similarity" in listed_names(out, "distances")
    assert "heads:" not in out
    code, out, _ = run_list(capsys, "losses", "*zzz*")
    assert code == 0 and out.strip() == "no losses match '*zzz*'"


def test_params_show_types_and_bounds(capsys):
    _, out, _ = run_list(capsys, "heads", "--params")
    assert "embedding_size = 128  (int, >= 1)  -- Embedding dimension D." in out
    assert "dropout = 0.0  (float, >= 0, < 1)" in out
    _, out, _ = run_list(capsys, "losses", "contrastive", "--params")
    assert "distance = None  (distance table | None)" in out
    assert "reducer = None  (reducer table | None)" in out
    _, out, _ = run_list(capsys, "losses", "cross_batch_memory", "--params")
    assert "loss = {'name': 'contrastive'}  (loss table)" in out and "miner = None  (miner table | None)" in out
    _, out, _ = run_list(capsys, "losses", "multiple_losses", "--params")
    assert "(list[loss table], length >= 1)" in out and "(list[miner table | None] | None)" in out


class _Example(Params):
    mode: Literal["avg", "max"] = "avg"
    sizes: list[int] = Field(default_factory=list)
    maybe: float | None = None
    count: int = Field(1, ge=1)
    distance: Annotated[ComponentTable, TableOf("distances")] = Field(default_factory=lambda: {"name": "cosine"})
    reducer: Annotated[ComponentTable, TableOf("reducer")] | None = None
    losses: list[Annotated[ComponentTable, TableOf("losses")]] = Field(default_factory=list)


@pytest.mark.parametrize(("field", "expected"), [
    ("mode", "'avg' | 'max'"), ("sizes", "list[int]"), ("maybe", "float | None"), ("count", "int"),
    ("distance", "distance table"), ("reducer", "reducer table | None"), ("losses", "list[loss table]"),
])
def test_type_names(field, expected):
    assert type_name(_Example.model_fields[field].rebuild_annotation()) == expected

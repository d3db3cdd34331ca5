"""The errors `dmlplug run` raises before its first training step are ones only the run can reveal (issue 15).

Each case provokes one pre-training error path of the engine (build, assembly, launch, resume, run directory)
and first checks that ``dmlplug.validate`` of the same recipe, in the same registry, passes: if validate
could have rejected it, the check belongs in validate. No case may reach a training step, except the
capability lie, which shows only in the first forward pass.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from e2e import TINY_RECIPE

import dmlplug
from dmlplug import Params
from dmlplug.engine.train_step import TrainStep
from dmlplug.errors import ComponentError, DataError, RunError
from dmlplug.plugins import PluginHost
from dmlplug.recipe import load_recipe

SMALL = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
         "data.sampler.batches_per_epoch=1", "head.embedding_size=8", "run.epochs=1"]


class Term(torch.nn.Module):
    """A regularizer that adds nothing (and has no ``ema_momentum``)."""

    def forward(self, step):
        return 0.0 * step.embeddings.sum()


def _host() -> PluginHost:
    host = PluginHost().load(entry_points=False)
    register = host.registry.register_callback

    def broken(params, ctx):
        raise ValueError("the factory broke")

    register("losses", "test")("broken_loss", broken)
    # Lies: requires "ema" but its module has no ema_momentum.
    register("regularizers", "test")("no_momentum", lambda p, c: Term(), requires=("ema",))
    # Lies: tagged as giving named embeddings, but it is the plain linear head.
    linear = host.registry.get("heads", "linear")
    # Declares named outputs (so validate passes) but builds the linear head, which returns one tensor.
    liar_params = type("LiarParams", (linear.params,), {"head_outputs": lambda self: ("a", "b")})
    register("heads", "test")("liar", linear.factory, params=liar_params)
    register("regularizers", "test")("wants_named", lambda p, c: Term(), requires=("named_embeddings",))
    # A dataset whose parameters cannot say whether it has a validation split, and which has none.
    glyphs = host.registry.get("datasets", "glyphs")

    class NoValParams(glyphs.params):
        def has_validation_split(self):
            return None

    register("datasets", "test")("no_val", glyphs.factory, params=NoValParams)
    empty = SimpleNamespace(train=[], test=[0], val=None, info={}, test_query_mask=None, test_gallery_mask=None,
                            default_augment="dml")
    register("datasets", "test")("empty", lambda p, c: empty, params=Params)

    def lone_test(params, ctx):  # the glyphs, but one test image per class: no query has a same-class item
        bundle = glyphs.factory(params, ctx)
        first = np.unique(bundle.test.labels, return_index=True)[1]
        bundle.test = bundle.test.subset(first)
        return bundle

    register("datasets", "test")("lone_test", lone_test, params=glyphs.params)
    return host


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_RECIPE)
    return path


@pytest.fixture
def steps(monkeypatch):
    """The training steps taken; a pre-training error must leave it empty."""
    taken: list[int] = []
    original = TrainStep.forward_terms

    def counted(self, *args, **kwargs):
        taken.append(kwargs.get("step", -1))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TrainStep, "forward_terms", counted)
    return taken


def _out(tmp_path: Path) -> str:
    return str(tmp_path / "runs")


CASES = {
    # case: (overrides, error type, phrase, may take the first forward pass)
    "factory raises": (['loss.name="broken_loss"'], ComponentError, "the factory broke", False),
    "missing dataset root": (['data.dataset={name="cub200", root="/nonexistent/cub"}'], DataError, "", False),
    "empty split": (['data.dataset={name="empty"}'], DataError, "empty train split", False),
    # Without the early check this ran a whole epoch (no initial evaluation) before the evaluation refused it.
    "test split without a valid query": (['data.dataset.name="lone_test"', "evaluation.initial=false"], DataError,
                                         "no query with another item of its class", False),
    "val split only the data shows": (['data.dataset.name="no_val"', 'evaluation.select_on="val"'], RunError,
                                      "no validation split", False),
    "component without its EMA momentum": (['regularizers=[{name="no_momentum"}]'], RunError, "ema_momentum",
                                           False),
    "head that lies about named embeddings": (['head.name="liar"', 'regularizers=[{name="wants_named"}]'],
                                              RunError, "named embeddings", True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pre_training_run_error_is_not_a_validate_error(case, recipe, tmp_path, steps, single_thread):
    overrides, error, phrase, may_forward = CASES[case]
    host = _host()
    pairs = [*SMALL, f'run.output_dir="{_out(tmp_path)}"', *overrides]
    load_recipe(recipe, pairs, registry=host.registry)  # validate passes: only the run can tell
    with pytest.raises(error, match=phrase):
        dmlplug.run(recipe, overrides=pairs, host=host, quiet=True)
    assert not steps or (may_forward and len(steps) == 1), f"{case}: reached training step(s) {steps}"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("finished")
    path = folder / "tiny.toml"
    path.write_text(TINY_RECIPE)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors; restored, or later tests' in-process runs would use one thread
    try:
        result = dmlplug.run(path, overrides=SMALL, out=folder / "run", quiet=True)
    finally:
        torch.set_num_threads(previous)
    return path, Path(result.directory) if hasattr(result, "directory") else folder / "run"


RESUME_CASES = {
    "resume of a folder that is no run": ("no_run", RunError, "not a run directory"),
    "resume of a completed run": ("completed", RunError, "nothing to resume"),
    "resume with a different recipe": ("changed", RunError, "recipe differs"),
    "run directory with another --out": ("other_out", RunError, "different --out"),
    "output folder is a file": ("file_out", RunError, ""),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_launch_and_resume_errors_are_not_validate_errors(case, finished_run, tmp_path, steps):
    path, run_dir = finished_run
    how, error, phrase = RESUME_CASES[case]
    overrides = list(SMALL)
    kwargs: dict = {}
    if how == "no_run":
        (tmp_path / "empty").mkdir()
        kwargs = {"out": tmp_path / "empty", "resume": True}
    elif how == "completed":
        kwargs = {"out": run_dir, "resume": True}
    elif how == "changed":
        overrides += ["run.epochs=2", "run.seed=1"]
        kwargs = {"out": run_dir, "resume": True}
    elif how == "file_out":
        (tmp_path / "a_file").write_text("")
        overrides += [f'run.output_dir="{tmp_path / "a_file"}"']
    dmlplug.validate(path, overrides=overrides)
    with pytest.raises(error, match=phrase):
        if how == "other_out":
            dmlplug.run(run_dir, out=tmp_path / "elsewhere", quiet=True)
        else:
            dmlplug.run(path, overrides=overrides, quiet=True, **kwargs)
    assert not steps, f"{case}: reached training step(s) {steps}"

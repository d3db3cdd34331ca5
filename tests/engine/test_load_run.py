"""dmlplug.load_run: a trained run comes back with its recipe, dataset, test transform and exact weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from e2e import TINY_RECIPE

import dmlplug
from dmlplug.errors import DataError

#: A seconds-long run: 4 steps, one evaluation (so best.pt and last.pt hold the final weights).
SETS = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
        "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=1", "evaluation.initial=false"]


class _KeepEmbeddings:
    """Keeps the run's own test embeddings and its final model from inside the run."""

    @dmlplug.hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        self.embeddings = run.eval_context.numpy_embeddings().copy()

    @dmlplug.hookimpl
    def on_run_end(self, run, status, error):
        self.state = {k: v.detach().clone() for k, v in run.model.state_dict().items()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from dmlplug.plugins import get_host

    folder = tmp_path_factory.mktemp("load_run")
    recipe = folder / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    keep, host = _KeepEmbeddings(), get_host()
    host.register_run_plugin(keep, "keep-embeddings")
    try:
        result = dmlplug.run(recipe, overrides=SETS, out=folder / "run", quiet=True)
    finally:
        host.unregister_run_plugin("keep-embeddings")
    assert result.status == "completed"
    return folder / "run", keep


def _embed(loaded, indices):
    images = torch.stack([loaded.test_transform(loaded.dataset.test.load_image(int(i))) for i in indices])
    return loaded.model.embed(images).numpy()


def test_loaded_model_embeds_like_the_trained_run(trained):
    run_dir, keep = trained
    loaded = dmlplug.load_run(run_dir)
    assert loaded.checkpoint == run_dir / "checkpoints" / "best.pt" and loaded.run_dir == run_dir
    assert loaded.recipe.run.name == "tiny" and loaded.recipe.data.batch_size == 8
    assert loaded.resolved_recipe["run"]["name"] == "tiny"
    assert not loaded.model.training
    for key, value in loaded.model.state_dict().items():
        assert torch.equal(value, keep.state[key]), key
    assert len(loaded.dataset.test) == len(keep.embeddings)
    picked = [0, 3, len(keep.embeddings) - 1]
    np.testing.assert_allclose(_embed(loaded, picked), keep.embeddings[picked], rtol=1e-5, atol=1e-6)


def test_last_checkpoint_and_a_checkpoint_file_load_too(trained):
    run_dir, keep = trained
    last = dmlplug.load_run(run_dir, checkpoint="last")
    assert last.checkpoint == run_dir / "checkpoints" / "last.pt"
    by_file = dmlplug.load_run(run_dir / "checkpoints" / "last.pt")
    assert by_file.run_dir == run_dir and by_file.checkpoint == last.checkpoint
    np.testing.assert_array_equal(_embed(last, [1, 2]), _embed(by_file, [1, 2]))
    np.testing.assert_allclose(_embed(by_file, [1, 2]), keep.embeddings[[1, 2]], rtol=1e-5, atol=1e-6)


def test_bad_paths_give_data_errors(trained, tmp_path):
    with pytest.raises(DataError, match="no run directory or checkpoint"):
        dmlplug.load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no checkpoint in run directory"):
        dmlplug.load_run(tmp_path / "empty")
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    with pytest.raises(DataError, match="junk.pt"):
        dmlplug.load_run(junk)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(DataError, match="not a dmlplug checkpoint"):
        dmlplug.load_run(foreign)


def test_load_run_is_lazy_and_documented():
    assert "load_run" in dmlplug.__all__ and "checkpoint" in dmlplug.load_run.__doc__

"""Checkpoint files: loaded with ``weights_only`` (a planted pickle payload runs nothing), sealed with their sha256
(a truncated or overwritten file is reported as damaged, with the intact checkpoint to use instead), generators
restored exactly, and checkpoints of the previous format still loading."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from dmlplug.checkpoints import load_checkpoint, plain, rng_state, save_checkpoint, set_rng_state
from dmlplug.errors import RunError


def plant(marker: str) -> None:
    """What a malicious checkpoint would run on load (here: create ``marker``)."""
    Path(marker).touch()


class Payload:
    """Pickles as the call ``plant(marker)``: unpickling it runs that call."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return plant, (str(self.marker),)


def _draws():
    return random.random(), float(np.random.random_sample()), torch.rand(3).tolist()


def test_generators_are_saved_as_plain_values_and_restored_exactly(tmp_path):
    path = save_checkpoint(tmp_path / "last.pt", {"rng": rng_state()})
    expected = _draws()
    _draws()  # move every generator on
    state = torch.load(path, weights_only=True)  # no numpy object in the file
    set_rng_state(state["rng"])
    assert _draws() == expected


def test_a_checkpoint_of_the_previous_format_still_loads(tmp_path):
    """Format 2 stored numpy's state as an array, written by torch.save unsealed: it loads and restores."""
    old = {"format": 2, "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                                "torch": torch.get_rng_state()}}
    torch.save(old, tmp_path / "last.pt")
    expected = _draws()
    set_rng_state(load_checkpoint(tmp_path / "last.pt")["rng"])
    assert _draws() == expected


def test_a_planted_pickle_payload_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "code-ran"
    torch.save({"format": 3, "model": {"w": torch.zeros(2)}, "extra": Payload(marker)}, tmp_path / "last.pt")
    with pytest.raises(RunError) as info:
        load_checkpoint(tmp_path / "last.pt")
    assert not marker.exists()
    message = info.value.render()
    assert "refused to load checkpoint" in message and "run code" in message
    assert "test_checkpoint_files.plant" in message  # what it would have called


def test_saving_an_object_is_refused_where_it_is_and_numpy_values_become_plain(tmp_path):
    with pytest.raises(RunError, match=r"checkpoint\.regularizers\.queue.*Payload") as info:
        save_checkpoint(tmp_path / "last.pt", {"regularizers": {"queue": Payload(tmp_path / "m")}})
    assert "get_extra_state" in info.value.fix
    assert not (tmp_path / "last.pt").exists()

    module = torch.nn.BatchNorm1d(2)
    state = {"model": module.state_dict(), "metrics": {"recall@1": np.float64(0.5)}, "ids": np.arange(3)}
    converted = plain(state)
    assert converted["model"] is state["model"]  # nothing to convert: the very object, with its _metadata
    assert type(converted["metrics"]["recall@1"]) is float and torch.equal(converted["ids"], torch.arange(3))
    save_checkpoint(tmp_path / "last.pt", state)
    loaded = torch.load(tmp_path / "last.pt", weights_only=True)
    assert loaded["model"]._metadata == module.state_dict()._metadata


def _overwrite_weights(path: Path, weights: torch.Tensor) -> None:
    """Overwrite the first 64 bytes of ``weights`` inside the file with 0xFF (NaN in float32)."""
    data = bytearray(path.read_bytes())
    at = data.find(weights.numpy().tobytes()[:64])
    assert at > 0
    data[at:at + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))


def test_a_truncated_or_overwritten_checkpoint_is_damaged_and_the_fix_offers_the_intact_one(tmp_path):
    weights = torch.arange(4096, dtype=torch.float32)
    last = save_checkpoint(tmp_path / "last.pt", {"model": {"w": weights}})
    best = save_checkpoint(tmp_path / "best.pt", {"model": {"w": weights}})

    _overwrite_weights(last, weights)
    assert torch.isnan(torch.load(last, weights_only=True)["model"]["w"]).any()  # torch alone loads the NaNs
    with pytest.raises(RunError, match="is damaged: its content does not match the sha256") as info:
        load_checkpoint(last)
    assert info.value.fix.startswith("use best.pt from the same folder, which is intact")
    assert "copy best.pt to last.pt" in info.value.fix

    best.write_bytes(best.read_bytes()[:-1000])  # a copy that stopped early
    with pytest.raises(RunError, match="is damaged") as info:
        load_checkpoint(best)
    assert "no other checkpoint in this folder is intact" in info.value.fix and ".pt" not in info.value.fix

    save_checkpoint(last, {"model": {"w": weights}})  # written anew: intact again
    with pytest.raises(RunError, match="is damaged") as info:
        load_checkpoint(best)
    assert info.value.fix.startswith("use last.pt") and "best.pt" not in info.value.fix


@pytest.mark.slow
def test_a_damaged_checkpoint_of_a_run_is_reported_as_damaged_by_load_run_and_resume(tiny_recipe, tmp_path):
    """Weights overwritten in place would load and evaluate to NaN; the run's other checkpoint is offered."""
    import dmlplug
    from dmlplug.errors import DataError

    sets = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
            "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=1", "evaluation.initial=false"]
    run_dir = dmlplug.run(tiny_recipe, overrides=sets, out=tmp_path / "run", quiet=True).directory
    last, best = run_dir / "checkpoints" / "last.pt", run_dir / "checkpoints" / "best.pt"
    weights = max(load_checkpoint(best)["model"].values(), key=lambda t: t.numel() if t.is_floating_point() else 0)

    _overwrite_weights(best, weights)
    with pytest.raises(DataError, match="best.pt is damaged") as info:
        dmlplug.load_run(run_dir)
    assert info.value.fix.startswith("use last.pt")

    _overwrite_weights(last, weights)
    best.write_bytes(last.read_bytes()[:-1])
    with pytest.raises(RunError, match="last.pt is damaged") as info:
        dmlplug.run(run_dir, overrides=["run.epochs=2"], resume=True, force=True, quiet=True)
    assert info.value.fix.startswith("no other checkpoint in this folder is intact")

"""``dmlplug export``: a trained run as a deployable bundle folder (model file + bundle.json), verified.

The bundle holds the embedding network (backbone, head, L2 normalisation) as ``model.onnx`` or ``model.pt``
and ``bundle.json``: where it came from (run, checkpoint, sha256), the model file's size and sha256 (checked
whenever the bundle is loaded), the test-time preprocessing, the embedding size, the similarity and the
thresholds, calibrated on the exported model's own embeddings. Before the folder appears, the exported model
is run on test images and compared with PyTorch; the folder is written atomically (docs/bundle.md). A
checkpoint written before any training step (a best epoch 0) is refused unless asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmlplug.bundle.atomic import atomic_folder, check_destination
from dmlplug.bundle.bundle import FORMAT, FORMAT_VERSION, MANIFEST, MODEL_FILES
from dmlplug.bundle.errors import BundleError, require_onnx
from dmlplug.bundle.verify import DEFAULT_IMAGES, DEFAULT_TOLERANCE, pick_images, verify_export
from dmlplug.files import sha256_file, write_json


def export_run(run_dir: str | Path, out: str | Path, *, checkpoint: str = "best", format: str = "onnx",
               images: int = DEFAULT_IMAGES, tolerance: float = DEFAULT_TOLERANCE, device: str = "cpu",
               calibrate: bool = True, allow_untrained: bool = False, log_model: bool = False,
               log: Any = None) -> dict[str, Any]:
    """Export a run; see :func:`dmlplug.export`. Returns the written ``bundle.json`` as a dict.

    ``allow_untrained`` exports a checkpoint written before any training step (refused otherwise, see
    :func:`refuse_untrained`); ``log_model`` asks the plugins to log the written bundle as a model
    (:func:`~dmlplug.bundle.exported.announce_export`); ``log`` prints progress (stderr by default).
    """
    if format not in MODEL_FILES:
        raise BundleError(f"unknown export format {format!r}", fix=f"use one of {', '.join(MODEL_FILES)}")
    if format == "onnx":
        require_onnx()  # before minutes of loading, say what to install
    if not tolerance >= 0:  # also rejects NaN
        raise BundleError(f"tolerance must be ≥ 0, got {tolerance}", fix="give e.g. --tolerance 1e-4")
    check_destination(Path(out), "bundle")  # before minutes of loading and calibrating, not after
    import torch

    from dmlplug.bundle.preprocess import describe_transform
    from dmlplug.bundle.runtime import EmbeddingNet, TorchRunner
    from dmlplug.distributions import DMLPLUG_VERSION
    from dmlplug.engine.trained_run import find_checkpoint, load_run

    say = log or (lambda message: print(message, file=sys.stderr))
    file = find_checkpoint(run_dir, checkpoint)[0]
    position = checkpoint_position(file)
    if not allow_untrained:
        refuse_untrained(file, position)  # before minutes of loading and calibrating
    loaded = load_run(run_dir, checkpoint=checkpoint, device=device)
    selected_on = selection_of(loaded)
    if selected_on == "test":
        say("warning: this checkpoint was selected on the TEST split (the recipe says select_on = \"test\"): "
            "bundle.json records source.selected_on = \"test\"")
    preprocessing = describe_transform(loaded.test_transform)
    net = EmbeddingNet(loaded.model).eval()
    test = loaded.dataset.test
    picked = pick_images(test.labels, images)
    batch = (torch.stack([loaded.test_transform(test.load_image(int(i))) for i in picked]) if len(picked)
             else torch.zeros(0, *preprocessing["input_size"]))
    example = batch[:2] if len(batch) >= 2 else torch.zeros(2, *preprocessing["input_size"])
    reference = TorchRunner(net, device)
    embedding_size = int(reference(example[:1]).shape[1])
    with atomic_folder(out, "bundle") as folder, _full_precision():
        model_file = folder / MODEL_FILES[format]
        example = example.to(device)
        exported = _write_model(net, example, model_file, format, device)
        say(f"verifying the {format} model on {len(batch)} test images")
        verification = (verify_export(reference, exported, batch, test.labels[picked], tolerance, label=format)
                        if len(batch) else {"images": 0, "tolerance": tolerance})
        # After the verification: the thresholds are calibrated on the vectors the bundle itself will produce.
        thresholds, calibration = _calibrate(loaded, exported, device, say) if calibrate else ({}, None)
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "dmlplug_version": DMLPLUG_VERSION,
            "source": {"run_dir": str(loaded.run_dir.resolve()) if loaded.run_dir else None,
                       "checkpoint": str(loaded.checkpoint.resolve()),
                       "checkpoint_sha256": sha256_file(loaded.checkpoint),
                       "recipe_name": loaded.recipe.run.name, "selected_on": selected_on, **position},
            "model": {"format": format, "file": model_file.name, "size": model_file.stat().st_size,
                      "sha256": sha256_file(model_file), "input": "images", "output": "embedding",
                      "dtype": "float32", "input_shape": ["batch", *preprocessing["input_size"]]},
            "input_size": preprocessing["input_size"],
            "preprocessing": preprocessing,
            "embedding_size": embedding_size,
            "normalized": True,
            "similarity": "cosine",
            "thresholds": thresholds,
            "calibration": calibration,
            "verification": verification,
        }
        write_json(folder / MANIFEST, manifest)
    # Only now that the folder is complete: a plugin that fails cannot cost the user the bundle.
    from dmlplug.bundle.exported import announce_export

    announce_export(Path(out), manifest, loaded.run_dir, log_model=log_model, say=say)
    return manifest


@contextmanager
def _full_precision() -> Iterator[None]:
    """Switch TF32 off while exporting and verifying, so PyTorch on a GPU computes the float32 the file holds.

    With TF32 (cuDNN's default for convolutions) a GPU's PyTorch embeddings differ from float32 ones by about
    1e-3, which would fail the verification although the exported graph is right.
    """
    import torch

    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _write_model(net: Any, example: Any, path: Path, format: str, device: str) -> Any:
    """Write the model file and return a runner that executes the written file."""
    from dmlplug.bundle.runtime import OnnxRunner, load_torchscript, write_onnx, write_torchscript

    if format == "onnx":
        write_onnx(net, example, path)
        return OnnxRunner(path, device)
    write_torchscript(net, example, path)
    return load_torchscript(path, device)


def selection_of(loaded: Any) -> str | None:
    """What selected the exported checkpoint (``bundle.json`` ``source.selected_on``), or ``None``.

    The run's ``selected_on`` (``"val"``, ``"last"``, ``"test"``) for its ``best.pt``; ``None`` for another
    checkpoint, or one outside a run directory (nothing says).
    """
    from dmlplug.errors import DmlplugError
    from dmlplug.evaluation.best import read_best

    if loaded.run_dir is None or loaded.checkpoint.name != "best.pt":
        return None
    try:
        return read_best(loaded.run_dir).selected_on
    except DmlplugError:  # no readable results.json: the run did not say
        return None


def checkpoint_position(file: Path) -> dict[str, int]:
    """``{"epoch", "step"}`` a checkpoint was written at (empty when it does not say, or cannot be read here).

    The file is memory-mapped, so the tensors are not read: this costs little before :func:`dmlplug.load_run`
    reads it in full (which reports an unreadable file).
    """
    from dmlplug.checkpoints import load_checkpoint
    from dmlplug.errors import DmlplugError

    try:  # not verified here: load_run checks the file's sha256 when it reads it in full
        state = load_checkpoint(file, mmap=True, verify=False)
    except DmlplugError:  # damaged or refused: load_run says so with its own message
        return {}
    if not isinstance(state, dict):
        return {}
    return {key: int(state[key]) for key in ("epoch", "step") if isinstance(state.get(key), int)}


def refuse_untrained(file: Path, position: dict[str, int]) -> None:
    """Refuse a checkpoint written before any training step: its model is the randomly initialised one.

    A run's ``best.pt`` is such a checkpoint when the initial evaluation (epoch 0) was its best, i.e. training
    never beat the untrained model on the selection metric; ``last.pt`` when the run trained zero epochs.

    Raises:
        BundleError: The checkpoint records step 0.
    """
    if position.get("step") != 0:
        return
    which = ("the run's best evaluation was the initial one: training never beat the untrained model on the "
             "selection metric" if file.name == "best.pt" else "the run made no training step")
    raise BundleError(
        f"{file} holds the untrained model (written at epoch {position.get('epoch', 0)}, before any training step; "
        f"{which}), so the bundle would embed with the initial weights; nothing was written", where=str(file),
        fix="train longer or check the run's metrics (results.json), export the last checkpoint with "
            "--checkpoint last if it is trained, or pass --allow-untrained to export the untrained model anyway "
            "(e.g. as a baseline)")


def _calibrate(loaded: Any, runner: Any, device: str, say: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(thresholds, calibration)`` for bundle.json: named thresholds with a default, and the full record.

    The split is embedded by ``runner``, the exported model, so the thresholds (placed for float32 scores,
    docs/calibration.md) hold for the vectors the bundle produces. The default threshold is the one of the
    first (strictest, by default 1e-3) target false-accept rate: a deployed search should rather miss a match
    than accept a wrong one.
    """
    if loaded.run_dir is None:
        say("no threshold calibration: the checkpoint is outside a run directory")
        return {}, None
    from dmlplug.bundle.calibrate import calibrate_loaded

    say("calibrating the thresholds on the exported model's embeddings")
    calibration = calibrate_loaded(loaded, device=device, runner=runner)
    say(calibration.format_table())
    record = calibration.to_dict()
    return thresholds_of(record), record


def thresholds_of(calibration: dict[str, Any]) -> dict[str, Any]:
    """``{"default": name, "values": {"far@0.001": t, "far@0.01": t, "max_f1": t}}`` of a calibration dict."""
    values = {f"far@{t['target_far']:g}": float(t["threshold"]) for t in calibration.get("thresholds", [])}
    if calibration.get("max_f1"):
        values["max_f1"] = float(calibration["max_f1"]["threshold"])
    default = next(iter(values), None)
    return {"default": default, "values": values, "split": calibration.get("split"),
            "test_split": calibration.get("test_split")}

"""One tiny trained run, its two bundles and a folder of its test images, shared by every bundle test; and the
tutorial docs/deploy.md with its really trained (shrunk) quickstart run, for the tests that need a trained model."""

from __future__ import annotations

import pytest
from e2e import BUNDLE_RUN_SETS as SETS
from e2e import TINY_RECIPE

#: Test images written to the image folder (some in a sub-folder, to check the recursive walk).
FOLDER_IMAGES = 24


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    import dmlplug

    folder = tmp_path_factory.mktemp("bundle_run")
    recipe = folder / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    result = dmlplug.run(recipe, overrides=SETS, out=folder / "run", quiet=True)
    assert result.status == "completed"
    return folder / "run"


@pytest.fixture(scope="session")
def onnx_bundle(run_dir, tmp_path_factory):
    import dmlplug

    out = tmp_path_factory.mktemp("bundles") / "onnx"
    dmlplug.export(run_dir, out)
    return out


@pytest.fixture(scope="session")
def torchscript_bundle(run_dir, tmp_path_factory):
    import dmlplug

    out = tmp_path_factory.mktemp("bundles") / "torchscript"
    dmlplug.export(run_dir, out, format="torchscript", calibrate=False)
    return out


@pytest.fixture(scope="session")
def image_folder(run_dir, tmp_path_factory):
    """PNG copies (lossless) of the first test images, half in a sub-folder, and a text file to be ignored."""
    import dmlplug

    loaded = dmlplug.load_run(run_dir)
    folder = tmp_path_factory.mktemp("images")
    for i in range(FOLDER_IMAGES):
        sub = folder / ("b" if i % 2 else "a")
        sub.mkdir(exist_ok=True)
        path = sub / f"img{i:03d}.png"
        loaded.dataset.test.load_image(i).save(path)
    (folder / "notes.txt").write_text("not an image, not listed")
    return folder


@pytest.fixture
def broken_folder(image_folder, tmp_path):
    """A copy of a few images plus one file with an image name that is not an image."""
    import shutil

    folder = tmp_path / "broken"
    folder.mkdir()
    for path in sorted(image_folder.rglob("*.png"))[:3]:
        shutil.copy(path, folder / path.name)
    (folder / "zz_broken.png").write_bytes(b"this is not a png")
    return folder


@pytest.fixture(scope="session")
def tutorial(tmp_path_factory):
    """docs/deploy.md, run lazily step by step in one folder (see deploy_doc.py); its quickstart run is trained
    once per session and shared by the tests that need a trained run."""
    from deploy_doc import Tutorial

    return Tutorial(tmp_path_factory.mktemp("deploy_tutorial"))


@pytest.fixture(scope="session")
def trained_run(tutorial):
    """The tutorial's shrunk, trained quickstart run and its ONNX bundle: ``(run_dir, bundle_dir)``."""
    run = tutorial.step("dmlplug run ")
    export = tutorial.step("dmlplug export ")
    run_args, export_args = run.args, export.args
    return (tutorial.folder / run_args[run_args.index("--out") + 1],
            tutorial.folder / export_args[export_args.index("--out") + 1])


@pytest.fixture(scope="session")
def trained_evaluation(trained_run):
    """The trained run's test split embedded as its evaluation embeds it (engine/evaluate.py's evaluate_split:
    the same helper, test transform and batch size): ``(N×D float32 embeddings, labels, the loaded run)``."""
    import dmlplug
    from dmlplug.engine.data import TransformedSource
    from dmlplug.engine.distributed import embed_dataset

    loaded = dmlplug.load_run(trained_run[0])
    embeddings, labels = embed_dataset(loaded.model, TransformedSource(loaded.dataset.test, loaded.test_transform),
                                       batch_size=loaded.recipe.data.eval_batch_size, workers=0, device="cpu")
    return embeddings.numpy(), labels, loaded


@pytest.fixture(scope="session")
def codec_registry():
    """The registry of the built-in plugins (no entry points): where `dmlplug index` finds the built-in codecs."""
    from dmlplug.plugins import PluginHost

    return PluginHost().load(entry_points=False).registry


@pytest.fixture(scope="session")
def codec(codec_registry):
    """``codec("pq:pq_m=4", nlist=4)``: a built-in index codec, picked as `dmlplug index --codec ... --nlist 4` does."""
    from dmlplug.bundle.codec_spec import pick_codec

    return lambda spec, **fields: pick_codec(spec, codec_registry, **fields)

"""`dmlplug data check` of your own datasets (folder, csv, a recipe's), and the cheap file check of every run (#41)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dmlplug.cli import main
from dmlplug.errors import DataError


def cli(capsys, *args: str) -> tuple[int, str]:
    """``dmlplug ARGS`` in process: (exit status, standard output and error)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def _folder(trees, root: Path, classes: int = 3, per_class: int = 3, suffix: str = ".png") -> list[Path]:
    """``root/c<i>/<k><suffix>``: class folders of small images; returns every file."""
    return [trees.write_image(root / f"c{c}" / f"{k}{suffix}", seed=10 * c + k)
            for c in range(classes) for k in range(per_class)]


@pytest.fixture
def bad_folder(trees, tmp_path):
    """A class-folder tree (split by class) with four bad files: not an image, empty, a cut PNG, a cut JPEG."""
    files = _folder(trees, tmp_path / "data", classes=4)
    trees.corrupt(files[1])
    files[2].write_bytes(b"")
    trees.truncate(files[4])
    cut_jpeg = trees.write_image(tmp_path / "data" / "c2" / "9.jpg", seed=99)
    trees.truncate(cut_jpeg)
    return tmp_path / "data", {"not an image": files[1], "empty file": files[2], "truncated PNG": files[4],
                               "jpeg": cut_jpeg}


def test_folder_check_names_every_bad_file_with_its_reason_and_deep_decodes(bad_folder, capsys):
    root, bad = bad_folder
    code, out = cli(capsys, "data", "check", "folder", "--root", str(root))
    assert code == 2, out
    assert f"{bad['not an image']}: not an image (it starts with b'this is no')" in out
    assert f"{bad['empty file']}: empty file (0 bytes)" in out
    assert f"{bad['truncated PNG']}: truncated PNG (it does not end with the IEND chunk)" in out
    assert str(bad["jpeg"]) not in out  # a JPEG's end says nothing: only decoding finds it
    assert "3 images are not usable" in out and "no download is known" not in out
    code, out = cli(capsys, "data", "check", "folder")
    assert code == 2 and "dataset 'folder' needs its root to be checked" in out, out
    code, out = cli(capsys, "data", "check", "folder", "--root", str(root), "--deep")
    assert code == 2, out
    assert f"{bad['jpeg']}: does not decode: OSError: " in out
    assert "4 images are not usable (corrupt, truncated or not images)" in out


def test_a_good_csv_list_passes_and_a_split_too_small_for_a_run_does_not(trees, tmp_path, capsys):
    rows = ["path,label,split"] + [f"img/{c}_{k}.jpg,{c},{'test' if c >= 2 else 'train'}"
                                   for c in range(4) for k in range(2)]
    for row in rows[1:]:
        trees.write_image(tmp_path / row.split(",")[0], seed=len(row))
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    code, out = cli(capsys, "data", "check", "csv", "--root", str(tmp_path), "--set", "file=list.csv", "--deep")
    assert code == 0, out
    assert "complete; every image decodes" in out and "test_classes" in out
    (tmp_path / "list.csv").write_text("\n".join(rows[:-2]) + "\n")  # class 3 leaves the test split: one class
    code, out = cli(capsys, "data", "check", "csv", "--root", str(tmp_path), "--set", "file=list.csv")
    assert code == 2, out
    assert "the test split of the dataset has 1 class with a query" in out


RECIPE = """
[data]
batch_size = {batch_size}
image_size = 16
[data.dataset]
name = "folder"
root = "{root}"
split = "classes"
train_classes = 2
[data.sampler]
name = "m_per_class"
m = 2
[backbone]
name = "timm"
model = "resnet10t"
[loss]
name = "multi_similarity"
[[loggers]]
name = "console"
"""


def test_a_recipe_is_checked_against_its_sampler_as_a_run_checks_it(trees, tmp_path, capsys):
    _folder(trees, tmp_path / "data", classes=4)
    recipe = tmp_path / "own.toml"
    recipe.write_text(RECIPE.format(batch_size=6, root=tmp_path / "data"))  # 3 classes a batch, 2 train classes
    code, out = cli(capsys, "data", "check", str(recipe))
    assert code == 2, out
    assert "sampler 'm_per_class' needs 3 distinct classes per batch, the training set has 2" in out
    code, out = cli(capsys, "data", "check", str(recipe), "--set", "data.batch_size=4")
    assert code == 0, out
    assert "steps_per_epoch" in out


def test_a_run_finds_the_bad_files_when_it_builds_the_dataset_before_anything_else(bad_folder, tmp_path):
    import dmlplug

    root, bad = bad_folder
    recipe = tmp_path / "own.toml"
    recipe.write_text(RECIPE.format(batch_size=4, root=root))
    with pytest.raises(DataError) as info:
        dmlplug.run(recipe, out=tmp_path / "run", quiet=True)
    message = info.value.render()
    assert "folder: 3 of 13 image files are not usable images" in message
    assert all(f"{bad[reason]}: {reason}" in message for reason in ("not an image", "empty file", "truncated PNG"))
    assert "dmlplug data check <recipe> --deep" in message
    assert not (tmp_path / "run").exists()


def test_under_skip_the_bad_files_are_a_warning(bad_folder, build, caplog):
    root, bad = bad_folder
    with caplog.at_level(logging.WARNING, logger="dmlplug.data"):
        bundle = build("folder", root=str(root), decode_errors="skip")
    assert len(bundle.train) + len(bundle.test) == 13
    assert f"{bad['empty file']}: empty file (0 bytes)" in caplog.text and "decode_errors = \"skip\"" in caplog.text
    build("folder", root=str(root), check_files=False)  # switched off: not even a warning

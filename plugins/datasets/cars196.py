"""CARS196 (Stanford Cars): 16,185 images of 196 car models.

Zero-shot protocol (docs/methods/revisiting.md): classes 1-98 train (8,054 images), 99-196 test (8,131 images),
ignoring the release's own train/test flag. Three on-disk layouts are read (auto-detected):

* ``annos_mat``: the "all images" release, ``car_ims/`` + ``cars_annos.mat``;
* ``devkit``: the classification release, ``cars_train/`` + ``cars_test/`` + ``devkit/*.mat`` with the
  test labels of ``cars_test_annos_withlabels.mat``; both halves are pooled before the class split;
* ``folders``: the re-packaging used by the Revisiting/ooDML/NIR code, ``images/<class name>/*.jpg``,
  classes in sorted-name order (the first 98 sorted names are the official classes 1-98).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlplug_builtins.datasets.common import assemble_bundle, missing_file_error, resolve_root

if TYPE_CHECKING:
    from dmlplug_builtins.datasets import Cars196Params

NAME = "cars196"

LAYOUT = """\
  one of
  (annos_mat) <root>/cars_annos.mat and <root>/car_ims/000001.jpg ... 016185.jpg
  (devkit)    <root>/devkit/cars_meta.mat, <root>/devkit/cars_train_annos.mat,
              <root>/cars_test_annos_withlabels.mat (or under devkit/), <root>/cars_train/*.jpg,
              <root>/cars_test/*.jpg
  (folders)   <root>/images/<class name>/*.jpg   (196 class folders, e.g. "AM General Hummer SUV 2000")"""

STANDARD = {"train_images": 8054, "train_classes": 98, "test_images": 8131, "test_classes": 98}

TEST_ANNOS = "cars_test_annos_withlabels.mat"


def build_bundle(params: Cars196Params):
    """Build the CARS196 bundle (train: classes 1..N, test: the rest)."""
    from dmlplug.data.image_files import FileImageSource
    from dmlplug.data.splits import split_by_class_order

    root = resolve_root(params.root, dataset=NAME, layout=LAYOUT)
    layout = _detect_layout(root) if params.layout == "auto" else params.layout
    reader = {"annos_mat": _read_annos_mat, "devkit": _read_devkit, "folders": _read_folders}[layout]
    paths, class_ids, names = reader(root)
    source = FileImageSource.from_class_keys(
        paths, class_ids, class_names=names, name=NAME, decode_errors=params.decode_errors,
        check_files=params.check_files)
    first = sum(1 for c in set(class_ids) if c <= params.train_classes)
    train, test = split_by_class_order(source, first, names=(f"{NAME}/train", f"{NAME}/test"))
    return assemble_bundle(NAME, params, train, test, root=root, layout=layout,
                           expected=STANDARD if params.train_classes == 98 else None)


def _detect_layout(root) -> str:
    if (root / "cars_annos.mat").is_file():
        return "annos_mat"
    if (root / "devkit" / "cars_meta.mat").is_file():
        return "devkit"
    if (root / "images").is_dir():
        return "folders"
    raise missing_file_error(NAME, root / "cars_annos.mat", LAYOUT, root=root)


def _require(path, root):
    if not path.is_file():
        raise missing_file_error(NAME, path, LAYOUT, root=root)
    return path


def _mat_struct(path, key: str) -> dict[str, list]:
    """Columns of a MATLAB 1×N struct array ``key`` as ``{field: [values]}``."""
    import numpy as np
    from scipy.io import loadmat

    from dmlplug.errors import DataError

    try:
        records = np.atleast_1d(loadmat(str(path), squeeze_me=True)[key])
    except (KeyError, ValueError, OSError) as exc:
        raise DataError(f"{NAME}: cannot read {key!r} from {path}: {exc}", where=str(path),
                        fix="re-download the annotation file; it may be truncated") from None
    assert records.dtype.names is not None  # a MATLAB struct array: a structured numpy array
    return {field: [records[i][field] for i in range(len(records))] for field in records.dtype.names}


def _mat_class_names(path) -> dict[int, str]:
    """Official class index (1-based) -> class name, from a ``class_names`` cell array."""
    import numpy as np
    from scipy.io import loadmat

    names = np.atleast_1d(loadmat(str(path), squeeze_me=True)["class_names"])
    return {i + 1: str(name) for i, name in enumerate(names)}


def _read_annos_mat(root):
    annos_path = _require(root / "cars_annos.mat", root)
    annos = _mat_struct(annos_path, "annotations")
    names = _mat_class_names(annos_path)
    paths = [str(root / str(p)) for p in annos["relative_im_path"]]
    return paths, [int(c) for c in annos["class"]], names


def _read_devkit(root):
    names = _mat_class_names(_require(root / "devkit" / "cars_meta.mat", root))
    train = _mat_struct(_require(root / "devkit" / "cars_train_annos.mat", root), "annotations")
    test_path = root / TEST_ANNOS if (root / TEST_ANNOS).is_file() else root / "devkit" / TEST_ANNOS
    test = _mat_struct(_require(test_path, root), "annotations")
    paths = [str(root / "cars_train" / str(f)) for f in train["fname"]]
    paths += [str(root / "cars_test" / str(f)) for f in test["fname"]]
    return paths, [int(c) for c in train["class"]] + [int(c) for c in test["class"]], names


def _read_folders(root):
    from dmlplug.data.image_files import list_class_folders, list_image_files

    if not (root / "images").is_dir():
        raise missing_file_error(NAME, root / "images", LAYOUT, root=root)
    paths, class_ids, names = [], [], {}
    for position, folder in enumerate(list_class_folders(root / "images"), start=1):
        files = list_image_files(root / "images" / folder)
        names[position] = folder
        paths += files
        class_ids += [position] * len(files)
    return paths, class_ids, names

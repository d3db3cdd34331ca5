"""A dataset of your own, as folders: one sub-folder of images per class.

Two arrangements (``split = "auto"`` picks ``subfolders`` when ``train/`` and ``test/`` exist):

* ``subfolders``: ``<root>/train/<class>/*`` and ``<root>/test/<class>/*``, used as they are (the two may
  share classes; the zero-shot protocol wants them disjoint, which is your choice to make);
* ``classes``: ``<root>/<class>/*``; classes in sorted-name order, the first ``train_classes`` train and
  the rest test (class-disjoint, as CUB and CARS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlplug_builtins.datasets.common import assemble_bundle, missing_file_error, resolve_root

if TYPE_CHECKING:
    from dmlplug_builtins.datasets import FolderParams

NAME = "folder"

LAYOUT = """\
  <root>/train/<class name>/<image>   and   <root>/test/<class name>/<image>      (split = "subfolders")
  or <root>/<class name>/<image>, split into train/test by class                  (split = "classes")
  images: .jpg .jpeg .png .bmp .gif .tif .tiff .webp; hidden files (._*) are ignored"""


def build_bundle(params: FolderParams):
    """Build a bundle from class folders."""
    from dmlplug.data.splits import class_count, split_by_class_order

    root = resolve_root(params.root, dataset=NAME, layout=LAYOUT)
    split = params.split
    if split == "auto":
        has_both = (root / params.train_dir).is_dir() and (root / params.test_dir).is_dir()
        split = "subfolders" if has_both else "classes"
    if split == "subfolders":
        train = _read_classes(root / params.train_dir, f"{NAME}/train", params)
        test = _read_classes(root / params.test_dir, f"{NAME}/test", params)
        shared = len(set(train.class_names) & set(test.class_names))
        return assemble_bundle(NAME, params, train, test, root=root, layout=split,
                               info={"shared_classes": shared})
    source = _read_classes(root, NAME, params)
    first = class_count(params.train_classes, source.num_classes, what="train_classes")
    train, test = split_by_class_order(source, first, names=(f"{NAME}/train", f"{NAME}/test"))
    return assemble_bundle(NAME, params, train, test, root=root, layout=split)


def _read_classes(directory, name: str, params: FolderParams):
    from dmlplug.data.image_files import FileImageSource, list_class_folders, list_image_files
    from dmlplug.errors import DataError

    if not directory.is_dir():
        raise missing_file_error(NAME, directory, LAYOUT, root=directory.parent)
    paths, keys = [], []
    for folder in list_class_folders(directory):
        files = list_image_files(directory / folder)
        paths += files
        keys += [folder] * len(files)
    if not paths:
        raise DataError(f"{NAME}: no images in class folders under {directory}", where=str(directory),
                        fix="expected layout:\n" + LAYOUT)
    return FileImageSource.from_class_keys(paths, keys, name=name, decode_errors=params.decode_errors,
                                           check_files=False)

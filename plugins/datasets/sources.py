"""Where the benchmark datasets come from: the table ``dmlplug data download`` and ``dmlplug data check`` read.

One :class:`DownloadSpec` per dataset: the files (official URL, checksum, archive or plain file), how the
archives map to the folder the loader reads, the official counts, and the manual steps where no official
download remains. Sources, checksums and licences are documented in docs/datasets/README.md ("Downloading").

**Checksums.** A value here is the one *published by the dataset's authors* or recorded by widely used loaders;
none has been verified by this project against a fresh download (it was written without internet access):
each says where it comes from. ``None`` means "unknown": only the size (when known) is checked, and a corrupt
archive shows when it is unpacked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dmlplug.data.download import RemoteFile


@dataclass(frozen=True)
class DownloadSpec:
    """How to obtain and check one dataset.

    Attributes:
        name: Registered dataset name.
        folder: Folder under the data root that the loader's default ``root`` names (``CUB_200_2011``).
        files: What to download, in order; unpacked (or copied) together into one tree.
        inner: The folder inside the archives that becomes ``folder``; ``None``: their top level does.
        expected: Official counts: ``images``, ``classes``, ``train_images``, ``train_classes``,
            ``test_images``, ``test_classes`` (any subset).
        source: Human description of the official source, for messages.
        licence: Terms of use, in short; docs/datasets/README.md has the links.
        manual: Steps to obtain the data by hand when a file has no official URL (shown with exit status 2).
        extra_files: Files (relative to ``folder``) the loader needs that no download provides.
        extra_steps: How to obtain ``extra_files``.
    """

    name: str
    folder: str
    files: tuple[RemoteFile, ...]
    inner: str | None
    expected: dict[str, int]
    source: str
    licence: str
    manual: str | None = None
    extra_files: tuple[str, ...] = ()
    extra_steps: str | None = None
    aliases: tuple[str, ...] = field(default=())


CUB200 = DownloadSpec(
    name="cub200",
    folder="CUB_200_2011",
    files=(RemoteFile(
        "CUB_200_2011.tgz", "https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz",
        # md5 as recorded for this archive by many loaders (e.g. avalanche's CUB200, the cub2011 dataset
        # class); not verified here against a download.
        md5="97eceeb196236b17998738112f37df78"),),
    inner="CUB_200_2011",
    expected={"images": 11788, "classes": 200, "train_images": 5864, "train_classes": 100,
              "test_images": 5924, "test_classes": 100},
    source="CaltechDATA record 65de6-vp158 (https://www.vision.caltech.edu/datasets/cub_200_2011/)",
    licence="no licence file in the archive; its README asks you to cite Wah et al. 2011; the images are Flickr "
            "photos owned by their photographers: research use",
    aliases=("cub",),
)

SOP = DownloadSpec(
    name="sop",
    folder="Stanford_Online_Products",
    files=(RemoteFile(
        "Stanford_Online_Products.zip", "http://ftp.cs.stanford.edu/cs/cvgl/Stanford_Online_Products.zip",
        # md5 as recorded by pytorch-metric-learning's StanfordOnlineProducts; not verified here.
        md5="7f73d41a2f44250d4779881525aea32e"),),
    inner="Stanford_Online_Products",
    expected={"images": 120053, "classes": 22634, "train_images": 59551, "train_classes": 11318,
              "test_images": 60502, "test_classes": 11316},
    source="Stanford CVGL (https://cvgl.stanford.edu/projects/lifted_struct/)",
    licence="no licence file in the archive; the project page asks you to cite Oh Song et al. 2016; the "
            "images are eBay listing photos: research use",
    aliases=("stanford_online_products",),
)

CARS196_MANUAL = """\
The original Stanford URLs (ai.stanford.edu/~jkrause/cars/ and /car196/) no longer serve the files, and no
other official source exists. To install CARS196 by hand:
  1. obtain a copy of the "all images" release, car_ims.tgz + cars_annos.mat (16,185 images), or of the
     classification release: cars_train.tgz, cars_test.tgz, car_devkit.tgz and cars_test_annos_withlabels.mat
     (e.g. from a colleague or your institution's data store; public re-uploads exist on Kaggle and
     Hugging Face: check what you download);
  2. unpack it into <root>/cars196/ so that it holds car_ims/ + cars_annos.mat, or cars_train/ + cars_test/ +
     devkit/ + cars_test_annos_withlabels.mat (docs/datasets/cars196.md shows every layout the loader reads);
  3. run `dmlplug data check cars196 --root <root>` to compare it with the official counts.
A mirror serving car_ims.tgz and cars_annos.mat also works: `dmlplug data download cars196 --root <root>
--mirror URL` (or DMLPLUG_DATA_MIRROR=URL); neither file has a known checksum."""

CARS196 = DownloadSpec(
    name="cars196",
    folder="cars196",
    files=(RemoteFile("car_ims.tgz", None), RemoteFile("cars_annos.mat", None, extract=False)),
    inner=None,
    expected={"images": 16185, "classes": 196, "train_images": 8054, "train_classes": 98,
              "test_images": 8131, "test_classes": 98},
    source="none remains (formerly http://ai.stanford.edu/~jkrause/cars/car_dataset.html)",
    licence="the release's terms: non-commercial research use (the images are web photos owned by others)",
    manual=CARS196_MANUAL,
    aliases=("cars",),
)

INAT_EXTRA_STEPS = """\
The class-disjoint split lists of the metric-learning benchmark (Brown et al., Smooth-AP, ECCV 2020) have no
official download URL (the authors link them from https://github.com/Andrew-Brown1/Smooth_AP). Put them into
<root>/inaturalist2018/Inat_dataset_splits/ as Inaturalist_train_set1.txt and Inaturalist_test_set1.txt, then
run `dmlplug data check inaturalist2018 --root <root>`."""

INATURALIST2018 = DownloadSpec(
    name="inaturalist2018",
    folder="inaturalist2018",
    # md5 values published by the dataset's authors in github.com/visipedia/inat_comp (2018/README.md);
    # not verified here against a download.
    files=(
        RemoteFile("train_val2018.tar.gz",
                   "https://ml-inat-competition-datasets.s3.amazonaws.com/2018/train_val2018.tar.gz",
                   md5="b1c6952ce38f31868cc50ea72d066cc3"),
        RemoteFile("train2018.json.tar.gz",
                   "https://ml-inat-competition-datasets.s3.amazonaws.com/2018/train2018.json.tar.gz",
                   md5="bfa29d89d629cbf04d826a720c0a68b0"),
        RemoteFile("val2018.json.tar.gz",
                   "https://ml-inat-competition-datasets.s3.amazonaws.com/2018/val2018.json.tar.gz",
                   md5="f2ed8bfe3e9901cdefceb4e53cd3775d"),
    ),
    inner=None,
    # The loader's DML split (Smooth-AP lists): train and test are class-disjoint.
    expected={"images": 461939, "classes": 8142, "train_images": 325846, "train_classes": 5690,
              "test_images": 136093, "test_classes": 2452},
    source="iNaturalist 2018 competition, AWS Open Data (https://github.com/visipedia/inat_comp/tree/master/2018)",
    licence="the competition's terms (inat_comp 2018 README): non-commercial research and educational use; "
            "images keep their owners' licences",
    extra_files=("Inat_dataset_splits/Inaturalist_train_set1.txt", "Inat_dataset_splits/Inaturalist_test_set1.txt"),
    extra_steps=INAT_EXTRA_STEPS,
    aliases=("inat2018",),
)

#: Every downloadable dataset by registered name.
SPECS: dict[str, DownloadSpec] = {spec.name: spec for spec in (CUB200, CARS196, SOP, INATURALIST2018)}


def find_spec(name: str) -> DownloadSpec:
    """The spec of ``name`` (or one of its aliases).

    Raises:
        DataError: No dataset of that name can be downloaded or checked.
    """
    from dmlplug.errors import DataError, did_you_mean

    for spec in SPECS.values():
        if name == spec.name or name in spec.aliases:
            return spec
    raise DataError(f"no download is known for dataset {name!r}{did_you_mean(name, list(SPECS))}",
                    where=name, fix="one of: " + ", ".join(SPECS))

"""Built-in datasets: the embedded ``glyphs`` and loaders for the standard benchmarks and your own files.

This module holds every dataset's parameters, its thin factory and the registration hook. The loaders live
beside it, one module per on-disk layout (:mod:`.cub200`, :mod:`.cars196`, :mod:`.sop`, :mod:`.inaturalist`,
:mod:`.folder`, :mod:`.csv_list`; what they share in :mod:`.common`) and :mod:`.glyphs` (cache and splits of
the embedded dataset, rendered by :mod:`.glyph_render`). Factories import them when they run, so loading the
plugin imports pydantic only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.params import SplitSize

#: Families held out for testing by ``glyphs`` with ``split = "families"`` unless the recipe names its own:
#: scripts and symbol blocks of both kinds, about half of the classes of any catalogue prefix.
DEFAULT_TEST_FAMILIES: tuple[str, ...] = (
    "hebrew", "armenian", "georgian", "nko", "tifinagh", "canadian_syllabics",
    "letterlike", "arrows", "geometric_shapes", "dingbats", "yijing",
)


# ------------------------------------------------------------------------------------------ embedded glyphs
class GlyphsParams(Params):
    """Parameters of the embedded ``glyphs`` dataset."""

    num_classes: int = Field(
        300, ge=2,
        description="Number of character classes, shared out between the splits (the installed fonts give "
                    "about 2300; fewer make the dataset faster to train on).")
    images_per_class: int = Field(32, ge=2, le=1000, description="Images rendered per class.")
    image_size: int = Field(32, ge=16, le=128, description="Side length in pixels of the square images.")
    seed: int = Field(
        0, ge=0,
        description="Seed of the rendering variations and of the validation classes; independent of the "
                    "run seed so that every run sees the same images.")
    split: Literal["interleaved", "families"] = Field(
        "interleaved",
        description='"interleaved": every other class of each family is a test class (class-disjoint, '
                    'same families); "families": whole families are test families (distribution shift).')
    families: list[str] | None = Field(
        None,
        description="Only classes of these families (default: all); num_classes counts the classes kept. A "
                    "class renders the same images whichever families are chosen, so two datasets with "
                    "disjoint families share no class (e.g. a feature extractor trained on other families).")
    test_families: list[str] | None = Field(
        None,
        description='Families held out for testing when split = "families" (default: '
                    + ", ".join(DEFAULT_TEST_FAMILIES) + ").")
    val_fraction: float = Field(
        0.0, ge=0.0, lt=1.0,
        description="Fraction of the training classes moved to a validation split (0: no validation split).")
    cache_dir: str | None = Field(
        None, description="Folder of the generated-data cache (default: $DMLPLUG_CACHE or ~/.cache/dmlplug).")

    @field_validator("families", "test_families")
    @classmethod
    def _known_families(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        from dmlplug.errors import did_you_mean
        from dmlplug_builtins.datasets.glyph_render import FAMILY_NAMES

        for name in value:
            if name not in FAMILY_NAMES:
                raise ValueError(f"unknown glyph family {name!r}{did_you_mean(name, FAMILY_NAMES)}; "
                                 f"families are: {', '.join(FAMILY_NAMES)}")
        if not value:
            raise ValueError("name at least one family, or leave the key out")
        return value

    @model_validator(mode="after")
    def _no_empty_split(self) -> GlyphsParams:
        # The split sizes follow from the parameters alone (the catalogue order is fixed), so a count that
        # leaves a split without classes is caught here, by validate, instead of when the run starts.
        from dmlplug.errors import DataError
        from dmlplug_builtins.datasets.glyphs import check_glyph_splits

        try:
            check_glyph_splits(self)
        except DataError as exc:
            raise ValueError(f"{exc.what}; fix: {exc.fix}") from None
        return self

    def has_validation_split(self) -> bool:
        """A validation split exists exactly when ``val_fraction`` > 0."""
        return self.val_fraction > 0

    def validation_parameter(self) -> str:
        """``val_fraction`` moves a fraction of the training classes to the validation split."""
        return "val_fraction"

    def split_sizes(self) -> dict[str, SplitSize] | None:
        """Classes per split from the fixed catalogue order, ``images_per_class`` images in each class.

        ``None`` beyond the recorded catalogue, where the installed fonts decide.
        """
        from dmlplug_builtins.datasets.glyphs import split_class_counts

        counts = split_class_counts(self)
        if counts is None:
            return None
        return {name: SplitSize(classes, self.images_per_class) for name, classes in counts.items()}


def build_glyphs(params: GlyphsParams, ctx: BuildContext) -> Any:
    """Build the ``glyphs`` dataset bundle (generated or read from the cache)."""
    from dmlplug_builtins.datasets.glyphs import build_bundle

    return build_bundle(params)


# -------------------------------------------------------------------------------------------- file datasets
class FileDatasetParams(Params):
    """Options shared by every dataset read from image files."""

    val_classes: float = Field(
        0,
        ge=0,
        description="Training classes held out as a class-disjoint validation split: a fraction in (0, 1) "
        "or a whole count; 0 = no validation split.",
    )
    val_strategy: Literal["last", "random"] = Field(
        "last", description="Which training classes become validation: the last ones in class order "
        "(reference code) or a seeded random draw.")
    val_seed: int = Field(0, description="Seed of the random validation class draw.")
    decode_errors: Literal["fail", "skip"] = Field(
        "fail", description="An image that cannot be decoded: 'fail' stops with the file name, 'skip' "
        "logs it and serves another image of the same class.")
    check_files: bool = Field(
        True, description="Check at start-up, before the initial evaluation, that every listed image file "
        "exists (one directory listing per folder) and is a usable image without decoding it: readable, not "
        "empty, an image header, a PNG's end (`dmlplug data check --deep` decodes every one).")

    @field_validator("val_classes")
    @classmethod
    def _whole_count(cls, value: float) -> float:
        if value >= 1 and value != int(value):
            raise ValueError("a count of classes must be a whole number (or use a fraction below 1)")
        return value

    def has_validation_split(self) -> bool | None:
        """A validation split exists exactly when ``val_classes`` > 0 (the file layouts hold none of their own)."""
        return self.val_classes > 0

    def validation_parameter(self) -> str:
        """``val_classes`` holds a fraction (or a count) of the training classes out for validation."""
        return "val_classes"


class DownloadableParams(FileDatasetParams):
    """Options of the benchmark datasets ``dmlplug data download`` knows."""

    download: bool = Field(
        False, description="When root does not exist: download the dataset from its official source into "
        "root's parent folder first (as `dmlplug data download NAME --root <parent>` does; after validation, "
        "before anything else is built). root's last folder must be the dataset's own folder name.")


def _ensure_downloaded(name: str, params: Cub200Params | Cars196Params | SopParams | INaturalistParams,
                       ctx: BuildContext) -> None:
    """With ``download = true`` and no tree at ``root``: download it (see :func:`obtain.download`)."""
    if not params.download:
        return
    from dmlplug_builtins.datasets.obtain import download_into

    download_into(name, params.root, quiet=ctx.quiet)


class Cub200Params(DownloadableParams):
    """Parameters of the CUB200-2011 loader."""

    root: str = Field("${DMLPLUG_DATA}/CUB_200_2011", description="Folder of the extracted archive.")
    layout: Literal["auto", "official", "folders"] = Field(
        "auto", description="'official': images.txt + image_class_labels.txt + classes.txt; 'folders': "
        "only images/<NNN.Name>/ sub-folders; 'auto' picks the first that is present.")
    train_classes: int = Field(100, ge=1, description="Classes with id 1..N are training classes, the "
                               "others test classes (standard: 100).")


def build_cub200(params: Cub200Params, ctx: BuildContext) -> Any:
    """Build the CUB200-2011 bundle (train: classes 1..N, test: the rest)."""
    from dmlplug_builtins.datasets.cub200 import build_bundle

    _ensure_downloaded("cub200", params, ctx)
    return build_bundle(params)


class Cars196Params(DownloadableParams):
    """Parameters of the CARS196 loader."""

    root: str = Field("${DMLPLUG_DATA}/cars196", description="Folder of the extracted dataset.")
    layout: Literal["auto", "annos_mat", "devkit", "folders"] = Field(
        "auto", description="On-disk layout; 'auto' detects it from the files present.")
    train_classes: int = Field(98, ge=1, description="Classes 1..N (official class index, or sorted "
                               "folder name) are training classes, the others test classes (standard: 98).")


def build_cars196(params: Cars196Params, ctx: BuildContext) -> Any:
    """Build the CARS196 bundle (train: classes 1..N, test: the rest)."""
    from dmlplug_builtins.datasets.cars196 import build_bundle

    _ensure_downloaded("cars196", params, ctx)
    return build_bundle(params)


class SopParams(DownloadableParams):
    """Parameters of the Stanford Online Products loader."""

    root: str = Field("${DMLPLUG_DATA}/Stanford_Online_Products", description="Folder of the extracted "
                      "archive.")
    layout: Literal["auto", "official", "info_files"] = Field(
        "auto", description="'official': Ebay_*.txt next to the image folders; 'info_files': "
        "Info_Files/Ebay_*.txt with images under images/; 'auto' detects it.")
    val_strategy: Literal["last", "random"] = Field(
        "random", description="Which training classes become validation; SOP classes are grouped by "
        "super-class, so the default is a seeded random draw rather than the last classes.")


def build_sop(params: SopParams, ctx: BuildContext) -> Any:
    """Build the Stanford Online Products bundle from Ebay_train.txt / Ebay_test.txt."""
    from dmlplug_builtins.datasets.sop import build_bundle

    _ensure_downloaded("sop", params, ctx)
    return build_bundle(params)


class INaturalistParams(DownloadableParams):
    """Parameters of the iNaturalist-2018 loader."""

    root: str = Field("${DMLPLUG_DATA}/inaturalist2018", description="Folder holding the JSON files, the "
                      "images and the split lists.")
    annotation_files: list[str] = Field(
        default_factory=lambda: ["train2018.json", "val2018.json"],
        description="Competition annotation files (relative to root) whose images are pooled.")
    train_list: str = Field("Inat_dataset_splits/Inaturalist_train_set1.txt",
                            description="Training list (image paths or category ids), relative to root.")
    test_list: str = Field("Inat_dataset_splits/Inaturalist_test_set1.txt",
                           description="Test list (image paths or category ids), relative to root.")
    val_strategy: Literal["last", "random"] = Field("random", description="Which training classes "
                              "become validation; category ids follow taxonomy, so a seeded random draw.")


def build_inaturalist(params: INaturalistParams, ctx: BuildContext) -> Any:
    """Build the iNaturalist-2018 bundle from the JSON annotations and the split lists."""
    from dmlplug_builtins.datasets.inaturalist import build_bundle

    _ensure_downloaded("inaturalist2018", params, ctx)
    return build_bundle(params)


class FolderParams(FileDatasetParams):
    """Parameters of the class-folder dataset."""

    root: str = Field(description="Folder holding the class folders (or train/ and test/).")
    split: Literal["auto", "subfolders", "classes"] = Field(
        "auto", description="'subfolders': train/ and test/ each hold class folders; 'classes': root holds "
        "class folders, split by class; 'auto': subfolders when train/ and test/ exist.")
    train_dir: str = Field("train", description="Training folder under root (split = 'subfolders').")
    test_dir: str = Field("test", description="Test folder under root (split = 'subfolders').")
    train_classes: float = Field(
        0.5, gt=0, description="With split = 'classes': fraction in (0, 1) or whole count of the sorted "
        "classes used for training; the rest are test classes.")


def build_folder(params: FolderParams, ctx: BuildContext) -> Any:
    """Build a bundle from class folders."""
    from dmlplug_builtins.datasets.folder import build_bundle

    return build_bundle(params)


class CsvParams(FileDatasetParams):
    """Parameters of the CSV-list dataset."""

    root: str = Field(description="Folder that relative image paths (and a relative file) start from.")
    file: str = Field("images.csv", description="The CSV file, relative to root or absolute.")
    path_column: str = Field("path", description="Column holding the image path.")
    label_column: str = Field("label", description="Column holding the class name.")
    split_column: str = Field("split", description="Column holding train / test / val.")
    query_column: str = Field("query", description="Optional column flagging test queries.")
    gallery_column: str = Field("gallery", description="Optional column flagging test gallery images.")
    delimiter: str = Field(",", min_length=1, max_length=1, description="Field separator.")

    def has_validation_split(self) -> bool | None:
        """True with ``val_classes`` > 0; otherwise unknown until the file is read (it may hold 'val' rows)."""
        return True if self.val_classes > 0 else None


def build_csv(params: CsvParams, ctx: BuildContext) -> Any:
    """Build a bundle from a CSV list of images."""
    from dmlplug_builtins.datasets.csv_list import build_bundle

    return build_bundle(params)


# ------------------------------------------------------------------------------------------------ the hook
@hookimpl
def register_datasets(register: Any) -> None:
    """Register the embedded glyph dataset and the loaders for the standard benchmarks and your own files."""
    register("glyphs", build_glyphs, params=GlyphsParams, tags=("embedded",),
             description="Embedded glyph images (characters in ~25 script/symbol families) rendered offline "
                         "from matplotlib's fonts; no download.")
    register("cub200", build_cub200, params=Cub200Params, aliases=("cub",),
             description="CUB200-2011 birds from disk; classes 1-100 train, 101-200 test.")
    register("cars196", build_cars196, params=Cars196Params, aliases=("cars",),
             description="CARS196 from disk (devkit .mat or class folders); classes 1-98 train, 99-196 test.")
    register("sop", build_sop, params=SopParams, aliases=("stanford_online_products",), tags=("super_labels",),
             description="Stanford Online Products from disk; Ebay_train/Ebay_test split, super-class labels.")
    register("inaturalist2018", build_inaturalist, params=INaturalistParams, aliases=("inat2018",),
             tags=("super_labels",),
             description="iNaturalist-2018 from its JSON annotations with class-disjoint train/test lists.")
    register("folder", build_folder, params=FolderParams, aliases=("image_folder",),
             description="Your own images, one sub-folder per class (train/test folders or a class split).")
    register("csv", build_csv, params=CsvParams, aliases=("csv_list",),
             description="Your own images listed in a CSV file (path, label, split, query/gallery flags).")


@hookimpl
def register_commands(app: Any) -> None:
    """Add ``dmlplug data download`` and ``dmlplug data check``."""
    import typer

    from dmlplug_builtins.datasets import commands

    data = typer.Typer(help="Benchmark datasets: download from the official sources, check a copy.",
                       no_args_is_help=True)
    data.command("download")(commands.cmd_data_download)
    data.command("check")(commands.cmd_data_check)
    app.add_typer(data, name="data")

"""ooDML split files: the JSON format of dmlplug and the published reference pickles.

A split file lists train/test class partitions of one dataset ordered by increasing distribution shift
(FID), each with a train/validation class partition and seeded few-shot support episodes. The schema is
documented in ``docs/oodml.md``; the pydantic models below are its single source of truth.

The published ooDML files are pickles of numpy scalars. Unpickling can run arbitrary code, so
:func:`load_published_pickle` uses an unpickler that resolves nothing but stand-ins for numpy's ``dtype``
and ``scalar`` (plain number and string dtypes only, rebuilt from their type code), then converts to the
same in-memory :class:`SplitFile`.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dmlplug.errors import DataError

#: Value of the ``format`` key of every dmlplug split file.
SPLIT_FILE_FORMAT: Final = "dmlplug.oodml.splits"
#: Current schema version.
SPLIT_FILE_VERSION: Final = 1

#: ``{shots: {episode: {class name: [support image ids]}}}``.
Episodes = dict[int, dict[int, dict[str, list[str]]]]


class OodSplit(BaseModel):
    """One train/test partition of a dataset's classes."""

    model_config = ConfigDict(extra="forbid")

    id: int = Field(ge=1, description="Split id, 1 = least shifted; ids follow increasing FID.")
    fid: float = Field(description="Fréchet distance between the train and test class-mean feature sets.")
    train: list[str] = Field(min_length=1, description="Training class names (order defines label indices).")
    test: list[str] = Field(min_length=1, description="Test class names, disjoint from `train`.")
    split_train: list[str] = Field(
        description="Training classes used for training when a validation set is wanted (few-shot protocol)."
    )
    split_val: list[str] = Field(
        description="Validation classes; with `split_train` a partition of `train`."
    )
    episodes: Episodes = Field(
        default_factory=dict,
        description="Few-shot support sets: {shots: {episode: {test class: [image ids]}}}, `shots` ids per "
        "class, every test class in every episode; image ids are file basenames or dataset-relative paths.",
    )
    generator_key: str | None = Field(
        None,
        description="How the split was made: swapped-class count ('6', inverse '-10'), class-removal key "
        "('R4'), or None when unknown (published files).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> OodSplit:
        if not math.isfinite(self.fid):
            raise ValueError(f"fid must be finite, got {self.fid}")
        for name in ("train", "test", "split_train", "split_val"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} lists a class twice")
        overlap = set(self.train) & set(self.test)
        if overlap:
            raise ValueError(f"train and test share {len(overlap)} class(es), e.g. {sorted(overlap)[0]!r}")
        if set(self.split_train) & set(self.split_val) or sorted(self.split_train + self.split_val) != sorted(
            self.train
        ):
            raise ValueError("split_train and split_val must partition train")
        test = set(self.test)
        for shots, by_episode in self.episodes.items():
            if shots < 1:
                raise ValueError(f"episode shot count must be >= 1, got {shots}")
            for episode, support in by_episode.items():
                where = f"episodes[{shots}][{episode}]"
                if set(support) != test:
                    missing, extra = test - set(support), set(support) - test
                    raise ValueError(f"{where} must list every test class exactly: "
                                     f"{len(missing)} missing, {len(extra)} not test classes")
                for cls, images in support.items():
                    if len(images) != shots or len(set(images)) != shots:
                        raise ValueError(f"{where}[{cls!r}] must hold {shots} distinct images, got {images}")
        return self


class SplitFile(BaseModel):
    """A dataset's ooDML splits (``.splits``, in id order) plus provenance."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["dmlplug.oodml.splits"] = Field(default=SPLIT_FILE_FORMAT, description="File type marker.")
    version: Literal[1] = Field(default=SPLIT_FILE_VERSION, description="Schema version.")
    dataset: str | None = Field(None, description="Registered dataset name the class names refer to.")
    source: str | None = Field(None, description="Where the splits come from ('generated', a published file).")
    info: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form provenance: feature extractor, eps, swapping parameters, seed.",
    )
    splits: list[OodSplit] = Field(min_length=1, description="The splits, sorted by id.")

    @model_validator(mode="after")
    def _unique_ids(self) -> SplitFile:
        ids = [s.id for s in self.splits]
        if len(set(ids)) != len(ids):
            raise ValueError(f"split ids must be unique, got {ids}")
        self.splits.sort(key=lambda s: s.id)
        return self

    def by_id(self, split_id: int) -> OodSplit:
        """The split with id ``split_id``.

        Raises:
            DataError: No split has that id.
        """
        for split in self.splits:
            if split.id == split_id:
                return split
        raise DataError(f"no split with id {split_id}; the file has ids {[s.id for s in self.splits]}")


def save_splits(
    path: str | os.PathLike[str],
    splits: SplitFile | Sequence[OodSplit],
    *,
    dataset: str | None = None,
    source: str | None = None,
    info: Mapping[str, Any] | None = None,
) -> Path:
    """Write a split file as JSON, atomically (a temporary file in the same folder, then a rename).

    Args:
        path: Destination; parent folders are created.
        splits: A :class:`SplitFile`, or the splits alone (then ``dataset``/``source``/``info`` fill the
            file's header).
        dataset: Dataset name, when ``splits`` is a plain sequence.
        source: Provenance string, when ``splits`` is a plain sequence.
        info: Free-form provenance, when ``splits`` is a plain sequence.

    Returns:
        The path written.
    """
    if not isinstance(splits, SplitFile):
        splits = SplitFile(dataset=dataset, source=source, info=dict(info or {}), splits=list(splits))
    else:
        # Re-validate: the models are mutable, so the object may have been changed since construction.
        splits = SplitFile.model_validate(splits.model_dump())
    text = json.dumps(splits.model_dump(mode="json"), indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Same folder as the target, so that the final rename stays on one file system (and is atomic).
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        # mkstemp creates the file private (0600); give it the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp_name, 0o666 & ~umask)
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return target


def load_splits(path: str | os.PathLike[str]) -> SplitFile:
    """Read and validate a JSON split file written by :func:`save_splits`.

    Raises:
        DataError: The file is missing, is not JSON, or does not follow the schema.
    """
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError("split file not found", where=str(target),
                        fix="create one with `dmlplug oodml splits` or check the path") from None
    except OSError as exc:
        raise DataError(f"cannot read split file: {exc}", where=str(target)) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"split file is not valid JSON: {exc}", where=str(target)) from None
    return _validate(raw, where=str(target))


def load_published_pickle(
    path: str | os.PathLike[str], *, dataset: str | None = None
) -> SplitFile:
    """Read a published ooDML split pickle (e.g. ``cars196_splits.pkl``) safely.

    Only numpy scalars of plain number and string dtypes can be reconstructed; any other global
    (functions, classes, ``os.system`` …) makes loading fail before it is resolved, so nothing in the
    file can run.

    Args:
        path: The pickle file.
        dataset: Dataset name to record in the result.

    Returns:
        The splits as a :class:`SplitFile` (``source`` names the file; ``generator_key`` is unknown).

    Raises:
        DataError: The file is missing, not a pickle, refers to anything but numpy scalars, or its content
            does not have the published layout.
    """
    target = Path(path)
    try:
        with target.open("rb") as stream:
            raw = _NumpyScalarUnpickler(stream).load()
    except FileNotFoundError:
        raise DataError("published split file not found", where=str(target)) from None
    except _RefusedGlobal as exc:
        raise DataError(f"refusing to load the split pickle: {exc}", where=str(target),
                        fix="only the published ooDML split files (numpy scalars only) can be read") from None
    except Exception as exc:  # only allow-listed callables ran: anything else means a malformed file
        raise DataError(f"cannot unpickle split file: {type(exc).__name__}: {exc}", where=str(target)) from None
    if not isinstance(raw, dict):
        raise DataError(f"expected a dict keyed by split id, got {type(raw).__name__}", where=str(target))
    try:
        splits = [_published_split(key, value) for key, value in raw.items()]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"unexpected layout of published split file: {type(exc).__name__}: {exc}",
                        where=str(target)) from None
    return _validate(
        {"dataset": dataset, "source": f"published:{target.name}", "splits": splits}, where=str(target)
    )


def read_split_file(path: str | os.PathLike[str]) -> SplitFile:
    """Read a split file: a published ooDML pickle when the name ends in ``.pkl``, else dmlplug's JSON.

    Raises:
        DataError: See :func:`load_splits` and :func:`load_published_pickle`.
    """
    return load_published_pickle(path) if str(path).endswith(".pkl") else load_splits(path)


def locate(path: str | os.PathLike[str], search: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """``path`` when it exists (or is absolute), else the first ``folder / path`` that exists, else ``path``.

    Recipes name split files relative to where they were run; a run directory is a second place to look.
    """
    target = Path(path)
    if target.exists() or target.is_absolute():
        return target
    for folder in search:
        candidate = Path(folder) / target
        if candidate.exists():
            return candidate
    return target


def _published_split(key: Any, value: Mapping[str, Any]) -> dict[str, Any]:
    """One published entry as plain Python values in the dmlplug layout."""

    def names(values: Sequence[Any]) -> list[str]:
        return [_text(v) for v in values]

    episodes = {
        int(shots): {
            int(episode): {_text(cls): names(images) for cls, images in support.items()}
            for episode, support in by_episode.items()
        }
        for shots, by_episode in value["test_episodes"].items()
    }
    return {
        "id": int(key),
        "fid": float(value["fid"]),
        "train": names(value["train"]),
        "test": names(value["test"]),
        "split_train": names(value["split_train"]),
        "split_val": names(value["split_val"]),
        "episodes": episodes,
    }


def _text(value: Any) -> str:
    if not isinstance(value, str):  # np.str_ is a str subclass; anything else is not a class/image name
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return str(value)


def _validate(raw: Any, where: str) -> SplitFile:
    try:
        return SplitFile.model_validate(raw)
    except ValidationError as exc:
        raise DataError("invalid split file:\n" + _error_lines(exc), where=where,
                        fix="see docs/oodml.md for the split-file schema") from None


def _error_lines(exc: ValidationError) -> str:
    """One ``  splits.<location>: <message>`` line per schema violation."""
    lines = []
    for err in exc.errors():
        location = "".join(f".{part}" for part in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"  splits{location}: unknown key")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
            lines.append(f"  splits{location}: {err['msg']}{shown}")
    return "\n".join(lines)


class _RefusedGlobal(pickle.UnpicklingError):
    """A pickle asked for a global (or a value) outside the allow-list."""


_DTYPE_CODE = re.compile(r"[biufcSU][0-9]{1,4}")


class _DtypeSpec:
    """Stands in for ``numpy.dtype`` while unpickling.

    numpy's own ``dtype.__setstate__`` would apply whatever flags and sizes the file says (a crafted state
    can yield a corrupt dtype that crashes the interpreter), so only the type code and the byte order are
    taken from the file, and the dtype is rebuilt from them.
    """

    def __init__(self, code: Any, align: Any = False, copy: Any = True):
        if not isinstance(code, str) or not _DTYPE_CODE.fullmatch(code):
            raise _RefusedGlobal(f"numpy dtype {code!r} is not allowed (plain numbers and strings only)")
        self.dtype = np.dtype(code)

    def __setstate__(self, state: Any) -> None:
        # State layout: (version, byteorder, subarray, names, fields, elsize, alignment, flags).
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">"):
            self.dtype = self.dtype.newbyteorder(state[1])


def _numpy_scalar(spec: Any, payload: Any = None) -> Any:
    """Stand-in for the numpy scalar reconstructor, limited to plain dtypes and a payload of exactly one item."""
    if not isinstance(spec, _DtypeSpec) or not isinstance(payload, bytes):
        raise _RefusedGlobal("numpy scalar with an unexpected dtype or payload")
    if len(payload) != spec.dtype.itemsize:
        raise _RefusedGlobal(f"numpy scalar of {spec.dtype} with {len(payload)} bytes of data")
    return np.frombuffer(payload, dtype=spec.dtype)[0]


class _NumpyScalarUnpickler(pickle.Unpickler):
    """Resolves only numpy ``dtype`` and ``scalar`` (under numpy 1 and numpy 2 module names)."""

    _ALLOWED = {
        ("numpy", "dtype"): _DtypeSpec,
        ("numpy.core.multiarray", "scalar"): _numpy_scalar,
        ("numpy._core.multiarray", "scalar"): _numpy_scalar,
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise _RefusedGlobal(f"the file refers to {module}.{name}") from None

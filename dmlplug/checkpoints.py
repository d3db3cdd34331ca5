"""Checkpoints: written atomically and sealed with their sha256, loaded without running any code.

A checkpoint holds tensors and plain values only (numbers, strings, ``None``, lists, tuples, sets and dicts), so
it is loaded with ``torch.load(..., weights_only=True)``: a run directory or a checkpoint someone shares cannot
run code when it is resumed, evaluated or exported. :func:`save_checkpoint` stores numpy arrays as tensors and
numpy numbers as Python numbers and refuses any other object, naming where it is; :func:`load_checkpoint` refuses a
file that needs more, and a file whose content does not match the sha256 it carries
(:mod:`dmlplug.checkpoint_seal`) is reported as damaged, with the checkpoints of the same folder that are intact.
"""

from __future__ import annotations

import copy
import errno
import pickle
import random
import re
from collections import Counter, OrderedDict
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import torch

from dmlplug.checkpoint_seal import SealingWriter, seal_matches
from dmlplug.errors import RunError
from dmlplug.files import atomic_write

#: Values a checkpoint holds as they are (torch.load's ``weights_only`` accepts them).
_LEAVES = (bool, int, float, complex, str, bytes, bytearray, type(None), torch.Size, torch.dtype, torch.device)
_CONTAINERS = (dict, OrderedDict, Counter, list, tuple, set)

# Checkpoints of format 2 and older (before checkpoints were sealed) hold numpy's generator state as an array:
# they load with numpy's array reconstructor allowed, under its numpy 1 and numpy 2 names, and nothing else (an
# array of Python objects would name their classes, which stay refused).
_RECONSTRUCT = np.ndarray((0,)).__reduce__()[0]
_NUMPY_ARRAYS: list[Any] = [
    np.ndarray, np.dtype, *{type(np.dtype(code)) for code in "?bBhHiIlLqQefdFD"},  # dtypes of numbers
    *[(_RECONSTRUCT, f"{module}.multiarray._reconstruct") for module in ("numpy.core", "numpy._core")]]


def rng_state() -> dict[str, Any]:
    """States of python, numpy and torch (CPU and CUDA) random number generators, as plain values and tensors."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(), "numpy": (kind, [int(k) for k in keys], pos, has_gauss, cached),
             "torch": torch.get_rng_state()}
    # torch.cuda.is_initialized has no annotations in torch.
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore generators saved by :func:`rng_state` (CUDA states only when the device count matches)."""
    random.setstate(state["python"])
    kind, keys, *rest = state["numpy"]  # keys: a list (or an array, in checkpoints of older versions)
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"].cpu() if hasattr(state["torch"], "cpu") else state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def plain(value: Any, where: str = "state") -> Any:
    """``value`` with numpy arrays as tensors and numpy numbers as Python numbers (unchanged objects kept).

    Raises:
        RunError: ``value`` holds another object, which torch.load with ``weights_only`` would refuse.
    """
    if isinstance(value, torch.Tensor) or type(value) in _LEAVES:
        return value
    if isinstance(value, np.ndarray) and value.dtype != object:
        return torch.from_numpy(np.array(value))
    if isinstance(value, np.generic):
        return value.item()
    if type(value) not in _CONTAINERS:
        raise RunError(f"cannot checkpoint {where}: it is a {type(value).__module__}.{type(value).__qualname__}, and "
                       "a checkpoint holds tensors and plain values only (so that loading one runs no code)",
                       where=where, fix="return tensors, numbers, strings, lists and dicts from the component's "
                                        "state_dict() / get_extra_state() (docs/plugin-api.md, 'Checkpointed state')")
    if isinstance(value, dict):
        changed = {k: c for k, v in value.items() if (c := plain(v, f"{where}.{k}")) is not v}
        if not changed:
            return value
        out = copy.copy(value)  # keeps a state dict's _metadata (module versions)
        out.update(changed)
        return out
    items = [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Save ``state`` with torch.save, sealed with its sha256, atomically: a failure never corrupts an existing file.

    Raises:
        RunError: ``state`` holds an object other than tensors and plain values (nothing is written), or the
            file could not be written (full disk, permissions); the previous checkpoint at ``path`` is left as
            it was.
    """
    state = plain(state, "checkpoint")

    def write(handle: Any) -> None:
        writer = SealingWriter(handle)
        torch.save(state, cast("IO[bytes]", writer))  # write() and flush() are all torch.save calls
        writer.seal()

    try:
        return atomic_write(Path(path), write)
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise RunError(
            f"could not write checkpoint {path}: {'disk full' if full else exc.strerror or exc}",
            where=str(Path(path).parent),
            fix=("free disk space" if full else "check the run directory's permissions")
            + "; the previous checkpoint in this folder is intact and `dmlplug run RUN_DIR --resume` continues "
              "from it",
        ) from exc
    except RuntimeError as exc:  # torch wraps write failures of its zip writer in RuntimeError
        raise RunError(f"could not write checkpoint {path}: {exc}", where=str(Path(path).parent),
                       fix="free disk space; the previous checkpoint in this folder is intact") from exc


def load_checkpoint(path: Path, map_location: str = "cpu", *, mmap: bool = False,
                    verify: bool = True) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint`, with ``torch.load(..., weights_only=True)``.

    Args:
        path: The file.
        map_location: Where tensors are loaded.
        mmap: Map the file instead of reading it (tensors are read when used).
        verify: Check the sha256 the file carries first (reads the whole file once).

    Raises:
        RunError: The file is missing or unreadable, damaged (its content does not match its sha256, or it
            is not a complete checkpoint), or needs more than tensors and plain values to load (refused: loading
            it could run code).
    """
    path = Path(path)
    try:
        if verify and seal_matches(path) is False:
            raise _damaged(path, "its content does not match the sha256 it was written with (truncated, "
                                "overwritten, or damaged on disk)")
        with torch.serialization.safe_globals(_NUMPY_ARRAYS):
            checkpoint: dict[str, Any] = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
        return checkpoint
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" not in str(exc):  # a pickle cut or overwritten, not an object refused
            raise _damaged(path, f"its data cannot be read ({str(exc).splitlines()[0][:200]})") from None
        found = re.search(r"GLOBAL ([\w.]+)|got <class '([\w.]+)'>", str(exc))
        needs = (found[1] or found[2]) if found else "an object"
        raise RunError(f"refused to load checkpoint {path}: it needs {needs} to load, more than the tensors and "
                       "plain values a dmlplug checkpoint holds, and loading it could run code", where=str(path),
                       fix="load only checkpoints written by dmlplug; if a plugin of yours stores objects in its "
                           "state, make it store tensors, numbers, strings, lists and dicts (docs/resume.md)",
                       ) from None
    except (RuntimeError, EOFError, ValueError) as exc:
        raise _damaged(path, f"it is not a complete checkpoint ({str(exc).splitlines()[0][:200]})") from None
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR):  # torch's reader: EINVAL
            raise _damaged(path, f"it is not a complete checkpoint ({exc.strerror or exc})") from None
        raise RunError(f"cannot read checkpoint {path}: {exc.strerror or exc}", where=str(path),
                       fix="check that the file exists and is readable") from exc


def _damaged(path: Path, reason: str) -> RunError:
    """The error for a damaged checkpoint: what is wrong, and the intact checkpoints of the same folder to use.

    The fix never names the damaged file as one to use: it offers the folder's other checkpoints whose sha256
    still matches, else a new run.
    """
    intact = [other for other in sorted(path.parent.glob("*.pt")) if other.name != path.name and _intact(other)]
    if intact:
        names = " or ".join(other.name for other in intact)
        fix = f"use {names} from the same folder, which {'is' if len(intact) == 1 else 'are'} intact"
        if path.name == "last.pt":
            fix += (f"; to resume from its step, copy {intact[0].name} to last.pt and run "
                    "`dmlplug run RUN_DIR --resume` again")
        fix += ", or train again"
    else:
        fix = "no other checkpoint in this folder is intact: restore the file from a backup, or train again"
    return RunError(f"checkpoint {path} is damaged: {reason}", where=str(path), fix=fix)


def _intact(path: Path) -> bool:
    """Whether a checkpoint's sha256 matches (one written before checkpoints were sealed counts as intact)."""
    try:
        return seal_matches(path) is not False
    except OSError:
        return False

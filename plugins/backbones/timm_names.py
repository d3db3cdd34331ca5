"""The timm model names ``dmlplug validate`` checks ``[backbone] model`` against, and their generator.

The names are package data, one JSON file per timm version in ``timm_names_data/`` (``1.0.31.json``:
``{"timm_version": ..., "models": [...], "deprecated": {...}, "pretrained": [...], "untrained": [...]}``:
architectures, deprecated aliases, ``arch.tag`` names with weights and without), so that validation imports
neither timm nor torch when a file for the installed timm exists. For any other installed timm the names are read
from timm itself (:func:`known_names` then imports timm, and torch with it; once per process).

Run ``python -m dmlplug_builtins.backbones.timm_names`` (or ``python plugins/backbones/timm_names.py``) after
upgrading timm: it writes the file for the installed timm (older versions' files stay, for those who still
have them). ``tests/core/test_validate_timm_names.py`` fails while the installed timm has no file or its file
differs from what that timm lists.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import NamedTuple

#: Where the per-version JSON files are (shipped as package data of ``dmlplug_builtins.backbones``).
DATA_DIR = Path(__file__).with_name("timm_names_data")


class TimmNames(NamedTuple):
    """The model names of one timm version."""

    version: str
    #: ``timm.list_models()``: every architecture name (a pretrained tag may follow: ``resnet50.a1_in1k``).
    models: frozenset[str]
    #: Deprecated names timm still builds (with a warning), and the name that replaces each.
    deprecated: dict[str, str]
    #: ``timm.list_pretrained()``: every ``arch.tag`` with weights timm can fetch (the first tag of an architecture
    #: is its default); ``None`` for a file written before these were stored (then nothing is judged).
    pretrained: frozenset[str] | None = None
    #: Tagged names timm knows but has no weights for (``coatnet_0_224.untrained``).
    untrained: frozenset[str] | None = None


def installed_version() -> str | None:
    """The installed timm's version from its distribution metadata (imports nothing), ``None`` if absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("timm")
    except PackageNotFoundError:
        return None


def data_file(version: str, data_dir: Path | None = None) -> Path:
    """The JSON file holding timm ``version``'s names (it may not exist)."""
    return (DATA_DIR if data_dir is None else data_dir) / f"{version}.json"


def known_names(version: str | None = None) -> TimmNames | None:
    """The names of the installed timm (or of ``version``); ``None`` when timm is not installed.

    From the stored JSON file when one matches the version (imports neither timm nor torch); otherwise read from
    the installed timm itself, which **imports timm (and torch)**, cached per process.
    """
    version = installed_version() if version is None else version
    if version is None:
        return None
    path = data_file(version)
    if path.is_file():
        return _load(path)
    return from_installed_timm()


@cache
def _load(path: Path) -> TimmNames:
    data = json.loads(path.read_text(encoding="utf-8"))
    pretrained, untrained = data.get("pretrained"), data.get("untrained")
    return TimmNames(data["timm_version"], frozenset(data["models"]), dict(data["deprecated"]),
                     None if pretrained is None else frozenset(pretrained),
                     None if untrained is None else frozenset(untrained))


@cache
def from_installed_timm() -> TimmNames:
    """The names the installed timm lists (imports timm, and torch with it; cached per process)."""
    import timm
    from timm.models import get_deprecated_models

    deprecated = {old: new for old, new in get_deprecated_models().items() if new is not None}
    pretrained = frozenset(timm.list_pretrained())
    tagged = {name for name in timm.list_models(include_tags=True) if "." in name}
    return TimmNames(timm.__version__, frozenset(timm.list_models()), deprecated, pretrained,
                     frozenset(tagged - pretrained))


def render(names: TimmNames) -> str:
    """The JSON text stored for ``names``: sorted, one name per line (small diffs between versions)."""
    data = {"timm_version": names.version, "models": sorted(names.models),
            "deprecated": dict(sorted(names.deprecated.items())),
            "pretrained": sorted(names.pretrained or ()), "untrained": sorted(names.untrained or ())}
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def write(data_dir: Path | None = None) -> Path:
    """Write the installed timm's names to their JSON file (imports timm); returns the file's path."""
    names = from_installed_timm()
    path = data_file(names.version, data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(names), encoding="utf-8")
    return path


def main() -> None:
    """Write the JSON file of the installed timm's model names."""
    print(f"wrote {write()}")


if __name__ == "__main__":
    main()

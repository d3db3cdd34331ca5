"""Versions of installed distributions, read from their metadata: dmlplug's own and the ones a run records.

The one place a version is read: ``dmlplug.__version__``, the plugin list, the doctor and a run's
``environment.json`` all ask :func:`installed_version`, so the version in pyproject.toml is the only one written.
"""

from __future__ import annotations

from importlib import metadata


def installed_version(dist: str) -> str | None:
    """The version of the installed distribution ``dist`` (``"pytorch-metric-learning"``), or ``None``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


#: dmlplug's own version (``dmlplug.__version__``): pyproject.toml's, as installed; a source tree that was never
#: installed has none to read.
DMLPLUG_VERSION = installed_version("dmlplug") or "0+unknown"

"""``dmlplug plugin new NAME [--kind KIND]``: a pip-installable plugin distribution that passes its own tests.

The distribution ``dmlplug-<name>`` holds one package, ``dmlplug_<name>``, that registers one component of the
chosen kind (a loss by default: ``<name>_contrastive``) through the ``dmlplug`` entry-point group:
``__init__.py`` holds the Params, the factory and the hook (torch-free), a module beside it the implementation,
as the built-in plugins are laid out. ``<name>`` may be given with or without the ``dmlplug-``/``dmlplug_``
prefix. ``tests/`` checks the plugin with :mod:`dmlplug.testing` (where the kit has a check for the kind) and
with known answers; the contract test asks for its component among those checked, so it keeps passing when the
author adds a second one. The files are written to a temporary folder first and moved into place at the end,
so a failure never leaves a half-written plugin behind. Every kind's code is in :mod:`dmlplug.scaffold.template`
and the ``kinds_*`` modules.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from dmlplug.errors import DmlplugError, did_you_mean
from dmlplug.registry import normalize_kind, singular
from dmlplug.scaffold import kinds_data, kinds_eval, kinds_search, kinds_training
from dmlplug.scaffold.template import KindTemplate, render

_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$")

#: The template of every kind.
TEMPLATES: dict[str, KindTemplate] = {**kinds_training.TEMPLATES, **kinds_data.TEMPLATES, **kinds_eval.TEMPLATES,
                                      **kinds_search.TEMPLATES}

PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "A dmlplug plugin: the {singular} {name}."
requires-python = ">=3.11"
dependencies = ["dmlplug"]

[project.optional-dependencies]
test = ["pytest"]

# This table is the whole plugin mechanism: dmlplug loads every module of the `dmlplug` group.
[project.entry-points.dmlplug]
{module} = "{module}"

[tool.setuptools]
packages = ["{module}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]  # the tests run before the plugin is installed, too
'''


def plugin_names(name: str) -> dict[str, str]:
    """Distribution, module, loss and class names derived from ``NAME``.

    ``NAME``, ``dmlplug-NAME`` and ``dmlplug_NAME`` give the same names: the ``dmlplug`` prefix is
    added once, never doubled.

    Raises:
        DmlplugError: ``NAME`` is not lower-case letters and digits separated by ``-`` or ``_``, or is
            only the prefix.
    """
    if not _NAME.match(name):
        raise DmlplugError(f"invalid plugin name {name!r}", where="dmlplug plugin new NAME",
                           fix="use lower-case letters and digits, words separated by '-' or '_' (e.g. my-loss)")
    snake = name.replace("-", "_")
    if snake == "dmlplug":
        raise DmlplugError(f"invalid plugin name {name!r}: it is only the prefix", where="dmlplug plugin new NAME",
                           fix="name what the plugin adds, e.g. my-loss (the prefix dmlplug- is added for you)")
    snake = snake.removeprefix("dmlplug_")
    return {"dist": f"dmlplug-{snake.replace('_', '-')}", "module": f"dmlplug_{snake}", "module_short": snake,
            "loss": f"{snake}_contrastive", "camel": "".join(w.capitalize() for w in snake.split("_"))}


def new_plugin(name: str, parent: str | Path = ".", kind: str = "losses") -> Path:
    """Write the plugin distribution ``<parent>/dmlplug-<name>/`` registering one component of ``kind``.

    Returns:
        The distribution's folder.

    Raises:
        DmlplugError: Invalid name or kind, or the target folder already exists.
    """
    names = plugin_names(name)
    template = kind_template(kind)
    parent = Path(parent)
    target = parent / names["dist"]
    if target.exists():
        raise DmlplugError(f"{target} already exists", where="dmlplug plugin new",
                           fix="choose another NAME or --out folder, or remove the existing folder")
    kind = normalize_kind(kind)
    values = {"dist": names["dist"], "module": names["module"], "short": names["module_short"],
              "camel": names["camel"], "kind": kind, "singular": singular(kind)}
    files = render(template, values)
    files["pyproject.toml"] = PYPROJECT.format(**values, name=f"{names['module_short']}_{template.suffix}")
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".dmlplug-new-", dir=parent))
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def kind_template(kind: str) -> KindTemplate:
    """The template of ``kind`` (singular or plural).

    Raises:
        DmlplugError: Not a component kind.
    """
    try:
        return TEMPLATES[normalize_kind(kind)]
    except (DmlplugError, KeyError):
        known = [*TEMPLATES, *(singular(k) for k in TEMPLATES)]
        raise DmlplugError(f"no plugin template for kind {kind!r}{did_you_mean(kind, known)}",
                           where="dmlplug plugin new --kind", fix="kinds are: " + ", ".join(TEMPLATES)) from None


def component_name(name: str, kind: str) -> str:
    """The name the generated plugin registers its component under (``my_loss_contrastive``)."""
    return f"{plugin_names(name)['module_short']}_{kind_template(kind).suffix}"

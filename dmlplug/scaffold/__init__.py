"""``dmlplug plugin new NAME``: a pip-installable plugin distribution that passes its own tests as generated.

The distribution ``dmlplug-<name>`` holds one package, ``dmlplug_<name>``, that registers one loss,
``<name>_contrastive`` (a cosine contrastive loss that also consumes mined pairs or triplets), through the
``dmlplug`` entry-point group: ``__init__.py`` holds the Params, the factory and the hook (torch-free),
``loss.py`` the ``torch.nn.Module``, as the built-in plugins are laid out. ``<name>`` may be given with or
without the ``dmlplug-``/``dmlplug_`` prefix. ``tests/`` checks the plugin with :mod:`dmlplug.testing`
and with known answers. The files are written to a temporary folder first and moved into place at the
end, so a failure never leaves a half-written plugin behind.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from dmlplug.errors import DmlplugError

_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$")

PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "A dmlplug plugin: the {loss} loss."
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

MODULE = '''"""{dist}: registers the ``{loss}`` loss with dmlplug.

This module is the plugin: Params, factory and hook. It stays torch-free (the factory imports
``{module}.loss``, which holds the torch module), so loading the plugin and validating recipes stay fast.
"""

from __future__ import annotations

from pydantic import Field

from dmlplug import Params, hookimpl


class {camel}Params(Params):
    """Parameters of ``{loss}``."""

    pos_margin: float = Field(0.8, ge=-1, le=1, description="Positive pairs are pulled above this cosine similarity.")
    neg_margin: float = Field(0.3, ge=-1, le=1, description="Negative pairs are pushed below this cosine similarity.")


def build_{module_short}(params: {camel}Params, ctx):
    """Build the ``{loss}`` loss from its validated parameters."""
    from {module}.loss import {camel}Loss  # heavy imports inside the factory: loading the plugin stays fast

    return {camel}Loss(pos_margin=params.pos_margin, neg_margin=params.neg_margin)


@hookimpl
def register_losses(register):
    """Register ``{loss}``."""
    register("{loss}", build_{module_short}, params={camel}Params, tags=("uses_tuples",),
             description="Cosine contrastive loss with positive and negative margins.")
'''

LOSS = '''"""The ``{loss}`` loss as a module-level ``torch.nn.Module`` (imported only by the factory)."""

from __future__ import annotations

import torch
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu


class {camel}Loss(torch.nn.Module):
    """Cosine contrastive loss: mean hinge over positive pairs plus mean hinge over negative pairs.

    Without mined tuples every pair of the batch is used; with a miner, only the mined pairs (triplets
    are split into their positive and negative pairs).

    Args:
        pos_margin: Positive pairs are pulled above this cosine similarity.
        neg_margin: Negative pairs are pushed below this cosine similarity.
    """

    def __init__(self, pos_margin: float = 0.8, neg_margin: float = 0.3):
        super().__init__()
        self.pos_margin = pos_margin
        self.neg_margin = neg_margin

    def forward(self, embeddings, labels, indices_tuple=None):
        """The loss of a batch (PML's calling convention)."""
        sims = embeddings @ embeddings.t()
        if indices_tuple is None:
            a1, p, a2, n = lmu.get_all_pairs_indices(labels)
        else:
            a1, p, a2, n = lmu.convert_to_pairs(indices_tuple, labels)
        pos = torch.relu(self.pos_margin - sims[a1, p])
        neg = torch.relu(sims[a2, n] - self.neg_margin)
        zero = sims.sum() * 0  # keeps the graph when a batch has no pair of a kind
        return (pos.mean() if pos.numel() else zero) + (neg.mean() if neg.numel() else zero)
'''

TEST = '''"""Tests of {dist}: dmlplug's contract checks and known answers."""

import pytest
import torch

import {module}
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert check_plugin({module}) == [("losses", "{loss}")]


@pytest.mark.parametrize(("embeddings", "labels", "expected"), [
    ([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [0, 0, 1], 0.0),  # positives identical, negatives orthogonal
    ([[1.0, 0.0], [0.0, 1.0]], [0, 0], 0.8),                 # one orthogonal positive pair: 0.8 - 0
    ([[1.0, 0.0], [1.0, 0.0]], [0, 1], 0.7),                 # one identical negative pair: 1 - 0.3
])
def test_known_answers(embeddings, labels, expected):
    loss = build("losses", "{loss}", host=load_host({module}))
    value = loss(torch.tensor(embeddings), torch.tensor(labels))
    assert float(value) == pytest.approx(expected)
'''

README = '''# {dist}

A [dmlplug](https://pypi.org/project/dmlplug/) plugin that registers the loss `{loss}`.

```bash
pip install -e .              # dmlplug finds the plugin through the `dmlplug` entry point
dmlplug plugins               # lists {module}
dmlplug list losses           # lists {loss}
python -m pytest -q tests     # dmlplug's contract checks and the known-answer tests
```

Use it in a recipe:

```toml
[loss]
name = "{loss}"
pos_margin = 0.8
```
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


def new_plugin(name: str, parent: str | Path = ".") -> Path:
    """Write the plugin distribution ``<parent>/dmlplug-<name>/``; returns its path.

    Raises:
        DmlplugError: Invalid name, or the target folder already exists.
    """
    names = plugin_names(name)
    parent = Path(parent)
    target = parent / names["dist"]
    if target.exists():
        raise DmlplugError(f"{target} already exists", where="dmlplug plugin new",
                           fix="choose another NAME or --out folder, or remove the existing folder")
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".dmlplug-new-", dir=parent))
    try:
        files = {
            "pyproject.toml": PYPROJECT, f"{names['module']}/__init__.py": MODULE,
            f"{names['module']}/loss.py": LOSS,
            f"tests/test_{names['module_short']}.py": TEST, "README.md": README,
        }
        for relative, template in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(template.format(**names), encoding="utf-8")
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target

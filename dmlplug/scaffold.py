"""``dmlplug plugin new NAME``: a pip-installable plugin distribution that passes its own tests as generated.

The distribution ``dmlplug-<name>`` holds one module, ``dmlplug_<name>``, that registers one loss,
``<name>_contrastive`` (a cosine contrastive loss that also consumes mined pairs or triplets), through the
``dmlplug`` entry-point group; ``tests/`` checks it with :mod:`dmlplug.testing` and with known answers.
The files are written to a temporary folder first and moved into place at the end, so a failure never
leaves a half-written plugin behind.
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

MODULE = '''"""{dist}: registers the ``{loss}`` loss with dmlplug."""

from __future__ import annotations

from pydantic import Field

from dmlplug import Params, hookimpl


class {camel}Params(Params):
    """Parameters of ``{loss}``."""

    pos_margin: float = Field(0.8, ge=-1, le=1, description="Positive pairs are pulled above this cosine similarity.")
    neg_margin: float = Field(0.3, ge=-1, le=1, description="Negative pairs are pushed below this cosine similarity.")


def build_{module_short}(params: {camel}Params, ctx):
    """Cosine contrastive loss: mean hinge over positive pairs plus mean hinge over negative pairs.

    Without mined tuples every pair of the batch is used; with a miner, only the mined pairs (triplets
    are split into their positive and negative pairs).
    """
    import torch  # heavy imports inside the factory: loading the plugin stays fast
    from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

    class {camel}Loss(torch.nn.Module):
        def forward(self, embeddings, labels, indices_tuple=None):
            sims = embeddings @ embeddings.t()
            if indices_tuple is None:
                a1, p, a2, n = lmu.get_all_pairs_indices(labels)
            else:
                a1, p, a2, n = lmu.convert_to_pairs(indices_tuple, labels)
            pos = torch.relu(params.pos_margin - sims[a1, p])
            neg = torch.relu(sims[a2, n] - params.neg_margin)
            zero = sims.sum() * 0  # keeps the graph when a batch has no pair of a kind
            return (pos.mean() if pos.numel() else zero) + (neg.mean() if neg.numel() else zero)

    return {camel}Loss()


@hookimpl
def register_losses(register):
    """Register ``{loss}``."""
    register("{loss}", build_{module_short}, params={camel}Params, tags=("uses_tuples",),
             description="Cosine contrastive loss with positive and negative margins.")
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

    Raises:
        DmlplugError: ``NAME`` is not lower-case letters and digits separated by ``-`` or ``_``.
    """
    if not _NAME.match(name):
        raise DmlplugError(f"invalid plugin name {name!r}", where="dmlplug plugin new NAME",
                           fix="use lower-case letters and digits, words separated by '-' or '_' (e.g. my-loss)")
    snake = name.replace("-", "_")
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

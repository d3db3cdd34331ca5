"""An example dmlplug plugin that needs the engine services, written against the public API only.

It registers

* the regularizer ``example_centre_bank``: a centre loss with a learnable temperature. Class centres are a
  persistent buffer updated by an exponential moving average after every optimizer step
  (``after_optimizer_step``), so they are checkpointed and a resumed run continues exactly; the temperature
  trains in an optimizer group of its own (``optimizer_param_groups()``, with its own ``lr_mult``);
* the logger ``example_centre_figure``: at every evaluation (``on_eval_end``) it draws the centres of every
  ``example_centre_bank`` of the run (``run.components``) into ``<run>/figures/`` with ``dmlplug.files``.

Importing this module does not import torch: the factories import the implementation modules.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl

REGULARIZER = "example_centre_bank"
LOGGER = "example_centre_figure"


class CentreBankParams(Params):
    """Parameters of ``example_centre_bank``."""

    momentum: float = Field(0.9, ge=0.0, lt=1.0,
                            description="EMA momentum m of the centres: c = m·c + (1−m)·(batch mean of the class).")
    temperature: float = Field(0.1, gt=0.0, description="Initial temperature T of the centre-softmax term (learned).")
    pull_weight: float = Field(1.0, ge=0.0, description="Weight of the pull term: mean squared distance to own centre.")
    contrast_weight: float = Field(
        1.0, ge=0.0, description="Weight of the contrast term: cross-entropy of softmax(−distance² / T) over centres.")
    lr_mult: float = Field(10.0, gt=0.0, description="Learning-rate multiplier of the temperature's optimizer group.")


def build_centre_bank(params: CentreBankParams, ctx: BuildContext) -> Any:
    """Build the regularizer for ``ctx.num_classes`` centres of size ``ctx.embedding_size``.

    Raises:
        dmlplug.errors.ComponentError: The number of classes or the embedding size is unknown.
    """
    from dmlplug_example_regularizer.centre_bank import CentreBank

    return CentreBank(ctx.require("num_classes"), ctx.require("embedding_size"), momentum=params.momentum,
                      temperature=params.temperature, pull_weight=params.pull_weight,
                      contrast_weight=params.contrast_weight, lr_mult=params.lr_mult).to(ctx.device)


class CentreFigureParams(Params):
    """Parameters of ``example_centre_figure``."""

    folder: str = Field("figures", min_length=1, description="Folder of the run directory the figures go to.")


def build_centre_figure(params: CentreFigureParams, ctx: BuildContext) -> Any:
    """Build the logger."""
    from dmlplug_example_regularizer.figure import CentreFigureLogger

    return CentreFigureLogger(params.folder)


@hookimpl
def register_regularizers(register):
    """Register the centre-bank regularizer."""
    register(REGULARIZER, build_centre_bank, params=CentreBankParams,
             description="Example plugin: centre loss with EMA class centres (checkpointed) and a learned temperature.")


@hookimpl
def register_loggers(register):
    """Register the logger that draws the centres."""
    register(LOGGER, build_centre_figure, params=CentreFigureParams,
             description="Example plugin: draws every example_centre_bank's centres at each evaluation.")

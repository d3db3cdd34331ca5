"""An example dmlplug plugin that adds kinds the built-ins once kept closed: a distance and an lr schedule.

It registers

* the distance ``example_manhattan``: the L1 distance as a pytorch-metric-learning ``BaseDistance``, so every
  PML loss and miner takes it in its nested table (``[loss] distance = {name = "example_manhattan"}``);
* the learning-rate schedule ``example_linear_decay``: each group's learning rate decays linearly to
  ``final_fraction`` of it over the run's epochs, after an optional linear warm-up (``[scheduler] name = ...``).

Importing this module does not import torch: the factories import the implementation modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.protocols import Register

if TYPE_CHECKING:
    from dmlplug_example_geometry.linear_decay import LinearDecay
    from dmlplug_example_geometry.manhattan import ManhattanDistance

DISTANCE = "example_manhattan"
SCHEDULE = "example_linear_decay"


class ManhattanParams(Params):
    """Parameters of ``example_manhattan``."""

    normalize_embeddings: bool = Field(True, description="L2-normalise the embeddings before the L1 distance.")
    power: float = Field(1.0, gt=0, description="Raise every distance to this power.")


def build_manhattan(params: ManhattanParams, ctx: BuildContext) -> ManhattanDistance:
    """The L1 distance (it has no parameters or buffers, so the device does not matter)."""
    from dmlplug_example_geometry.manhattan import ManhattanDistance

    return ManhattanDistance(normalize_embeddings=params.normalize_embeddings, power=params.power)


class LinearDecayParams(Params):
    """Parameters of ``example_linear_decay``."""

    final_fraction: float = Field(0.1, ge=0, le=1,
                                  description="The last epoch trains at this fraction of each group's lr.")
    warmup_epochs: int = Field(0, ge=0, description="Linear warm-up epochs: lr · (e + 1) / (warmup_epochs + 1).")


def build_linear_decay(params: LinearDecayParams, ctx: BuildContext) -> LinearDecay:
    """Linear decay of the optimizer's groups over ``ctx.epochs`` epochs.

    Raises:
        dmlplug.errors.ComponentError: The optimizer or the number of epochs is unknown (built outside a run).
    """
    from dmlplug_example_geometry.linear_decay import LinearDecay

    return LinearDecay(ctx.require("optimizer"), epochs=ctx.require("epochs"), warmup_epochs=params.warmup_epochs,
                       final_fraction=params.final_fraction)


@hookimpl
def register_distances(register: Register) -> None:
    """Register the Manhattan distance."""
    register(DISTANCE, build_manhattan, params=ManhattanParams,
             description="Example plugin: L1 (Manhattan) distance, for any PML loss or miner.")


@hookimpl
def register_lr_schedules(register: Register) -> None:
    """Register the linear-decay schedule."""
    register(SCHEDULE, build_linear_decay, params=LinearDecayParams,
             description="Example plugin: linear warm-up, then linear decay to final_fraction · lr at the last epoch.")

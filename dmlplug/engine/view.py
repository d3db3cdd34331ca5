"""The read-only view of a run that every lifecycle hook receives (:class:`dmlplug.protocols.RunView`).

Hooks get this façade, never the engine's :class:`~dmlplug.engine.run.Run`: every attribute is a property
read from the live run when asked (so ``run.epoch`` is current in every hook), and nothing can be assigned.
Mappings are read-only proxies or fresh copies, so a hook cannot change the run's state through them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from dmlplug.engine.flatten import flatten_recipe


class ReadOnlyRun:
    """Implements :class:`dmlplug.protocols.RunView` over a live :class:`~dmlplug.engine.run.Run`.

    Args:
        run: The run being viewed.
    """

    __slots__ = ("_recipe", "_resolved", "_run")

    def __init__(self, run: Any):
        self._run = run
        self._resolved: dict[str, Any] | None = None
        self._recipe = ReadOnly(run.recipe.recipe)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ReadOnlyRun.__slots__:
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"RunView is read-only: cannot set {name!r}")

    def __repr__(self) -> str:
        return f"RunView(name={self.name!r}, epoch={self.epoch}, step={self.step}, directory={str(self.directory)!r})"

    # ------------------------------------------------------------------------------------------ recipe
    @property
    def recipe(self) -> Any:
        """The validated recipe's sections as read-only attributes (``run.recipe.run.epochs``)."""
        return self._recipe

    @property
    def resolved_recipe(self) -> dict[str, Any]:
        """The recipe as a plain nested dict with defaults filled in (a fresh copy on every access)."""
        if self._resolved is None:
            self._resolved = self._run.recipe.resolved()
        return copy.deepcopy(self._resolved)

    @property
    def flat_recipe(self) -> dict[str, Any]:
        """The resolved recipe flattened to ``{"section.key": value}`` (``"regularizers[0].weight"``)."""
        return flatten_recipe(self.resolved_recipe)

    @property
    def name(self) -> str:
        """The run name (``[run] name``)."""
        return self._recipe.run.name

    # ------------------------------------------------------------------------------------------ where
    @property
    def directory(self) -> Path:
        """The run directory."""
        return self._run.directory

    @property
    def checkpoint_dir(self) -> Path:
        """``<directory>/checkpoints``."""
        return self._run.checkpoint_dir

    @property
    def device(self) -> str:
        """The device training runs on."""
        return self._run.device

    @property
    def is_main_process(self) -> bool:
        """``True`` in a single-process run and on rank 0 of a distributed one."""
        return bool(self._run.dist.is_main)

    # ------------------------------------------------------------------------------------------ progress
    @property
    def epoch(self) -> int:
        """Current epoch (0 before training, 1-based while training)."""
        return self._run.epoch

    @property
    def step(self) -> int:
        """Global optimizer step (0 before training)."""
        return self._run.step

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch."""
        return len(self._run.components.sampler)

    @property
    def resumed(self) -> bool:
        """Whether this process continued the run from a checkpoint."""
        return bool(self._run.resumed)

    # ------------------------------------------------------------------------------------------ components
    @property
    def model(self) -> Any:
        """The embedding model being trained (backbone → head → L2 normalisation)."""
        return self._run.components.model

    @property
    def components(self) -> Mapping[str, Any]:
        """Every built component by recipe path (``"loss"``, ``"regularizers[0]"``, ``"loggers[0]"`` …)."""
        return MappingProxyType(self._run.components.by_path())

    @property
    def dataset(self) -> Any:
        """The run's :class:`dmlplug.data.DatasetBundle`."""
        return self._run.components.dataset

    @property
    def test_transform(self) -> Any:
        """The transform evaluation applies to an image (resize, crop, normalise)."""
        return self._run.components.test_transform

    @property
    def learning_rates(self) -> Mapping[str, float]:
        """Current learning rate of every optimizer group, by group name."""
        return MappingProxyType({g["name"]: float(g["lr"]) for g in self._run.training.optimizer.param_groups})

    # ------------------------------------------------------------------------------------------ results
    @property
    def initial_metrics(self) -> Mapping[str, float]:
        """Metrics of the evaluation before training (empty when none ran)."""
        return MappingProxyType(dict(self._run.initial_metrics))

    @property
    def latest_metrics(self) -> Mapping[str, float]:
        """Metrics of the latest evaluation."""
        return MappingProxyType(dict(self._run.last_metrics))

    @property
    def best_metrics(self) -> Mapping[str, float]:
        """Metrics of the best evaluation so far, by the recipe's selection metric."""
        return MappingProxyType(dict(self._run.best.metrics))

    @property
    def selected_on(self) -> str:
        """What selects ``best.pt``: ``"val"``, ``"last"`` or ``"test"`` (the recipe's word before the build)."""
        splits = self._run.splits
        return str(splits.select if splits is not None else self._run.recipe.recipe.evaluation.select_on)

    @property
    def eval_context(self) -> Any:
        """The :class:`dmlplug.evaluation.EvalContext` of the latest evaluation, or ``None``."""
        return self._run.eval_context

    @property
    def latest_pictures(self) -> Mapping[str, Path]:
        """PNG retrieval pictures of the latest evaluation by kind (``"worst"``, ``"sample"``); empty when none."""
        return MappingProxyType(self._run.latest_pictures)  # replaced by dmlplug.engine.pictures at each evaluation


class ReadOnly:
    """Attribute access to a pydantic model (the recipe) that refuses assignment, at any depth.

    Nested models are wrapped in turn, tables become read-only mappings and arrays tuples, so
    ``run.recipe.run.epochs = 3`` or ``run.recipe.backbone["model"] = "x"`` fail instead of changing the
    recipe the engine reads. Methods are the model's own (``run.recipe.model_dump()`` returns a fresh dict).
    """

    __slots__ = ("_target",)

    def __init__(self, target: Any):
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        return read_only(getattr(self._target, name))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the run's recipe is read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"the run's recipe is read-only: cannot delete {name!r}")

    def __repr__(self) -> str:
        return repr(self._target)


def read_only(value: Any) -> Any:
    """``value`` itself when immutable, else a read-only wrapper (:class:`ReadOnly`, mapping proxy, tuple)."""
    if isinstance(value, BaseModel):
        return ReadOnly(value)
    if isinstance(value, Mapping):
        return MappingProxyType({key: read_only(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(read_only(item) for item in value)
    if isinstance(value, set):
        return frozenset(value)
    return value

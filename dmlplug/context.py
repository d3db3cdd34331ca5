"""The build context handed to every component factory (public API)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from dmlplug.needs import EngineNeeds
    from dmlplug.registry import Registry
    from dmlplug.tables import ComponentTable

#: Fields of :class:`BuildContext` that hold an integer once set.
IntField = Literal["num_classes", "embedding_size", "feature_dim", "batch_size", "epochs", "steps_per_epoch",
                   "image_size"]
#: Fields that hold a built object once set (a module, an optimizer).
ObjectField = Literal["loss", "head", "optimizer"]


@dataclass
class BuildContext:
    """What a factory may need that the recipe should not repeat.

    Fields are filled as the run is assembled (dataset first, then sampler, backbone, head, loss …,
    optimizer, schedule), so a factory sees everything built before it. Outside a run
    (:func:`dmlplug.create`) unset fields keep their defaults and may be given as keyword arguments. A
    factory that cannot work without a field reads it with :meth:`require`, which raises the standard
    "needs X" error naming the component being built.

    Attributes:
        device: ``"cpu"`` or ``"cuda"`` (or ``"cuda:N"``).
        num_classes: Number of training classes (labels are ``0 .. num_classes-1``).
        embedding_size: Size of the evaluation embedding produced by the head.
        feature_dim: Size of the backbone's pooled features.
        train_labels: int64 numpy array of training labels (samplers).
        train_super_labels: int64 numpy array of super-class labels aligned with ``train_labels``, when
            the dataset has them (hierarchical samplers), else ``None``.
        batch_size: Training batch size.
        epochs: Number of training epochs.
        steps_per_epoch: Optimizer steps per epoch, once the sampler is built.
        image_size: Side length of the network input (augmentation policies).
        resize_size: ``[data] resize_size``: the shorter-side resize before evaluation's centre crop, when the
            recipe sets one (augmentation policies that train on the evaluation view read it).
        seed: The run seed.
        loss: The built loss module (regularizers that reuse its proxies read it).
        head: The built head module.
        param_groups: The named parameter groups the optimizer trains (optimizers): ``[{"name", "params",
            "lr", "weight_decay"}]`` with the recipe's per-group learning rates already applied.
        optimizer: The built optimizer (learning-rate schedules).
        run_dir: The run directory, when there is one.
        quiet: Whether the run prints nothing while training (``dmlplug run --quiet``); components print nothing.
        needs: The engine services the recipe's components require (:class:`dmlplug.needs.EngineNeeds`),
            inside a run; ``None`` outside one.
        building: The component being built, for messages (``"loss 'margin' (plugin 'revisiting')"``); set by
            the host before it calls a factory.
        host: The plugin host whose registry builds nested components. Engine-owned: plugins call
            :meth:`build` and :meth:`rebuild` instead of using it.
        recipe_specs: The recipe's validated component specs by recipe path (``"loss"``, ``"miner"``,
            ``"regularizers[0]"`` …), inside a run. Engine-owned: plugins call :meth:`rebuild`.
        search_space: The keys a ``dmlplug tune`` search samples, each as its Optuna distribution (tune
            samplers: a grid reads the choices); ``None`` outside a search.
    """

    device: str = "cpu"
    num_classes: int | None = None
    embedding_size: int | None = None
    feature_dim: int | None = None
    train_labels: npt.NDArray[np.int64] | None = None
    train_super_labels: npt.NDArray[np.int64] | None = None
    batch_size: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    image_size: int | None = None
    resize_size: int | None = None
    seed: int = 0
    loss: Any = None
    head: Any = None
    param_groups: list[dict[str, Any]] | None = None
    optimizer: Any = None
    run_dir: Path | None = None
    quiet: bool = False
    needs: EngineNeeds | None = None
    building: str = ""
    host: Any = None
    recipe_specs: Mapping[str, Any] = field(default_factory=dict)
    search_space: Mapping[str, Any] | None = None

    @overload
    def require(self, name: IntField) -> int: ...

    @overload
    def require(self, name: Literal["train_labels"]) -> npt.NDArray[np.int64]: ...

    @overload
    def require(self, name: Literal["param_groups"]) -> list[dict[str, Any]]: ...

    @overload
    def require(self, name: Literal["run_dir"]) -> Path: ...

    @overload
    def require(self, name: Literal["search_space"]) -> Mapping[str, Any]: ...

    @overload
    def require(self, name: ObjectField) -> Any: ...

    def require(self, name: str) -> Any:
        """The value of field ``name``; the standard error when it is not set.

        Example::

            def build_margin(params: MarginParams, ctx: BuildContext) -> MarginLoss:
                return MarginLoss(ctx.require("num_classes"), params.beta)

        Raises:
            dmlplug.errors.ComponentError: The field is unset (``None``): the component is built outside a
                run, or before what provides the field (``"needs num_classes from the build context"``).
        """
        value = getattr(self, name)
        if value is None:
            from dmlplug.errors import ComponentError

            who = self.building or "this component"
            raise ComponentError(
                f"{who} needs {name} from the build context, which is not set",
                where="build context",
                fix=f"build it inside a run, or give {name}=... to dmlplug.create / the BuildContext",
            )
        return value

    def build(self, kind: str, table: ComponentTable | Mapping[str, Any], *, where: str | None = None,
              **changes: Any) -> Any:
        """Build a nested component table (``{name = "contrastive", pos_margin = 0.1}``).

        A :class:`dmlplug.ComponentTable` field of a ``Params`` model is already validated and is built as
        it is; a plain mapping is validated first, in the registry of the run being built (the
        process-wide plugin host outside a run), so a nested component may come from any installed plugin.

        Args:
            kind: Component kind, singular or plural (``"loss"``, ``"distances"`` …).
            table: A validated :class:`dmlplug.ComponentTable`, or ``{"name": ..., **params}``.
            where: Recipe location for error messages (defaults to ``"<kind>[<name>]"``).
            **changes: Context fields that differ for the nested component (``embedding_size=512``).

        Raises:
            dmlplug.errors.ComponentError: The name is unknown, the table has no ``name``, or the table is of
                another kind.
            dmlplug.errors.RecipeError: A parameter is invalid.
        """
        from dmlplug.tables import validate_table

        validated = validate_table(kind, table, where=where, registry=self.registry())
        return validated.build(self.changed(**changes))

    def rebuild(self, path: str, **changes: Any) -> Any:
        """A fresh instance of the recipe's component at ``path``, or ``None`` when the recipe has none.

        Components that train their own copies of the recipe's loss or miner (S2SD's target criteria), or
        that need a second instance to inspect (record-keeper), use it.

        Args:
            path: Recipe path: ``"loss"``, ``"miner"``, ``"regularizers[0]"`` …
            **changes: Context fields that differ for the new instance (``embedding_size=1024``).
        """
        spec = self.recipe_specs.get(path)
        return None if spec is None else spec.build(self.changed(**changes))

    def changed(self, **changes: Any) -> BuildContext:
        """A copy with some fields changed (this context is not modified)."""
        return dataclasses.replace(self, **changes) if changes else self

    def registry(self) -> Registry:
        """The registry components are looked up in: the host's.

        Raises:
            ComponentError: The context has no host (a bare ``BuildContext()``): there is no registry to look a
                name up in, and no other one is guessed.
        """
        if self.host is None:
            from dmlplug.errors import ComponentError

            raise ComponentError("this BuildContext has no plugin host to look component names up in",
                                 where=self.building or "BuildContext",
                                 fix="build it with BuildContext(host=...), or use dmlplug.create (the command's "
                                     "host); a factory gets a context that has one")
        registry: Registry = self.host.registry
        return registry

"""The build context handed to every component factory (public API)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class BuildContext:
    """What a factory may need that the recipe should not repeat.

    Fields are filled as the run is assembled (dataset first, then sampler, backbone, head, loss …), so a
    factory sees everything built before it. Outside a run (:func:`dmlplug.create`) unset fields keep their
    defaults and may be given as keyword arguments.

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
        seed: The run seed.
        loss: The built loss module (regularizers that reuse its proxies read it).
        head: The built head module.
        run_dir: The run directory, when there is one.
        quiet: Whether console output should be reduced to log lines (``dmlplug run --quiet``).
        needs: The engine services the recipe's components require (:class:`dmlplug.needs.EngineNeeds`),
            inside a run; ``None`` outside one.
        host: The plugin host whose registry builds nested components. Engine-owned: plugins call
            :meth:`build` and :meth:`rebuild` instead of using it.
        recipe_specs: The recipe's validated component specs by recipe path (``"loss"``, ``"miner"``,
            ``"regularizers[0]"`` …), inside a run. Engine-owned: plugins call :meth:`rebuild`.
    """

    device: str = "cpu"
    num_classes: int | None = None
    embedding_size: int | None = None
    feature_dim: int | None = None
    train_labels: Any = None
    train_super_labels: Any = None
    batch_size: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    seed: int = 0
    loss: Any = None
    head: Any = None
    run_dir: Path | None = None
    quiet: bool = False
    needs: Any = None
    host: Any = None
    recipe_specs: Mapping[str, Any] = field(default_factory=dict)

    def build(self, kind: str, table: Mapping[str, Any], *, where: str | None = None, **changes: Any) -> Any:
        """Validate and build a nested component table (``{name = "contrastive", pos_margin = 0.1}``).

        The component is looked up in the registry of the run being built (the process-wide plugin host
        outside a run), so a nested component may come from any installed plugin.

        Args:
            kind: Component kind, singular or plural (``"loss"``, ``"distances"`` …).
            table: ``{"name": ..., **params}``.
            where: Recipe location for error messages (defaults to ``"<kind>[<name>]"``).
            **changes: Context fields that differ for the nested component (``embedding_size=512``).

        Raises:
            dmlplug.errors.ComponentError: The name is unknown or the table has no ``name``.
            dmlplug.errors.RecipeError: A parameter is invalid.
        """
        from dmlplug.errors import ComponentError

        name = table.get("name") if isinstance(table, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ComponentError(f"a nested {kind} table needs a `name`", where=where or kind,
                                 fix='e.g. {name = "..."}')
        registry = self._registry()
        info = registry.get(kind, name)
        rest = {k: v for k, v in table.items() if k != "name"}
        params = info.validate(rest, where=where or f"{info.kind}[{name}]", registry=registry)
        return info.build(params, self._changed(changes))

    def rebuild(self, path: str, **changes: Any) -> Any:
        """A fresh instance of the recipe's component at ``path``, or ``None`` when the recipe has none.

        Components that train their own copies of the recipe's loss or miner (S2SD's target criteria), or
        that need a second instance to inspect (record-keeper), use it.

        Args:
            path: Recipe path: ``"loss"``, ``"miner"``, ``"regularizers[0]"`` …
            **changes: Context fields that differ for the new instance (``embedding_size=1024``).
        """
        spec = self.recipe_specs.get(path)
        return None if spec is None else spec.build(self._changed(changes))

    def _changed(self, changes: dict[str, Any]) -> BuildContext:
        return dataclasses.replace(self, **changes) if changes else self

    def _registry(self) -> Any:
        host = self.host
        if host is None:
            from dmlplug.plugins import get_host

            host = get_host()
        return host.registry

"""What the engine must provide for a recipe's components: :class:`EngineNeeds`.

The recipe loader computes it once per recipe (:attr:`dmlplug.recipe.ValidatedRecipe.needs`); the engine
reads it to decide what to compute, and factories see it as :attr:`dmlplug.context.BuildContext.needs`.
Plain data: this module imports nothing, so plugins may use it at import time.
"""

from __future__ import annotations


class EngineNeeds:
    """The engine services a recipe's components require, and which components require them.

    Components declare services in their registered ``requires`` or in ``Params.extra_requires()``:
    ``"features"``, ``"feature_map"``, ``"views:N"``, ``"ema"``, ``"named_embeddings"`` and ``"selection_metric"``
    (an LR schedule that follows the selection metric: refused for a run that selects by none). Capabilities of other
    sections (``"loss:proxies"``) are not engine services and do not appear here.

    Attributes:
        views: Total number of augmented views of every training image: 1 = no extra view, ``"views:2"``
            gives 2 (the largest count any component asks for).
        by: Service name -> recipe paths of the components that require it, in recipe order, e.g.
            ``{"ema": ["regularizers[0]"], "views": ["regularizers[0]"]}``.
        __contains__: ``service in needs`` is True when at least one component requires ``service``,
            e.g. ``if "ema" in ctx.needs: ...``.
    """

    def __init__(self) -> None:
        self.views = 1
        self.by: dict[str, list[str]] = {}

    def __contains__(self, service: str) -> bool:
        return bool(self.by.get(service))

    def __repr__(self) -> str:
        return f"EngineNeeds(views={self.views}, by={self.by!r})"

    def add(self, service: str, path: str) -> None:
        """Record that the component at ``path`` requires ``service`` (used while the recipe is loaded)."""
        self.by.setdefault(service, []).append(path)

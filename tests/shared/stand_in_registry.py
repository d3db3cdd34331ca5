"""A registry of stand-in components that accept any parameters, for recipe tests that need no plugin."""

from dmlplug import Params
from dmlplug.registry import Registry

#: (kind, name) of the components the tests' recipes name, besides the loss they register themselves.
STAND_INS = [("datasets", "toy"), ("samplers", "m_per_class"), ("backbones", "timm"), ("heads", "linear"),
             ("evaluators", "recall"), ("evaluators", "map_at_r"), ("loggers", "console"),
             ("loggers", "tensorboard"), ("optimizers", "adam"), ("lr_schedules", "none")]


class OpenParams(Params):
    """Parameters that accept any key."""

    model_config = {"extra": "allow"}


class OpenEvaluatorParams(OpenParams):
    """Any key; declares the metrics of the default evaluators, so ``[evaluation] metric`` validates."""

    def metric_names(self) -> tuple[str, ...]:
        return ("recall@1", "recall@2", "recall@4", "recall@8", "map@r")


def stand_in_registry() -> Registry:
    """A registry holding :data:`STAND_INS`; factories build nothing."""
    reg = Registry()
    for kind, name in STAND_INS:
        params = OpenEvaluatorParams if kind == "evaluators" else OpenParams
        reg.register_callback(kind, "t")(name, lambda params, ctx: None, params=params)
    return reg

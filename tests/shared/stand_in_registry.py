"""A registry of stand-in components that accept any parameters, for recipe tests that need no plugin."""

from dmlplug import Params
from dmlplug.registry import Registry

#: (kind, name) of the components the tests' recipes name, besides the loss they register themselves.
STAND_INS = [("datasets", "toy"), ("samplers", "m_per_class"), ("backbones", "timm"), ("heads", "linear"),
             ("evaluators", "recall"), ("evaluators", "map_at_r"), ("loggers", "console"),
             ("loggers", "tensorboard")]


class OpenParams(Params):
    """Parameters that accept any key."""

    model_config = {"extra": "allow"}


def stand_in_registry() -> Registry:
    """A registry holding :data:`STAND_INS`; factories build nothing."""
    reg = Registry()
    for kind, name in STAND_INS:
        reg.register_callback(kind, "t")(name, lambda params, ctx: None, params=OpenParams)
    return reg

"""Layer-wise learning-rate decay: a timm model's parameters in one optimizer group per layer.

Fine-tuning recipes of pretrained ViTs (BEiT, MAE and timm's own ``layer_decay``) train the layers near the input
at smaller learning rates than those near the output: layer ``N`` of ``L + 1`` at the base rate times
``decay^(L - N)``. The layers are those timm's ``group_matcher(coarse=False)`` of the model numbers (for a ViT:
the stem, i.e. patch and position embeddings and class token, is layer 0, block ``i`` layer ``i + 1``, the final
norm joins the last block), so every timm model that defines one is supported, CNNs included (stem, then stages'
blocks). Imported by :class:`.timm_backbone.TimmBackbone` when the optimizer is built (timm at module level).
"""

from __future__ import annotations

from typing import Any

from timm.models import group_parameters

from dmlplug.errors import ComponentError


def layer_of_parameters(model: Any) -> dict[str, int]:
    """``{parameter name: layer}`` by timm's fine-grained ``group_matcher`` of ``model``; layers count from 0.

    Raises:
        ComponentError: The model defines no ``group_matcher`` (its layers are unknown).
    """
    matcher = getattr(model, "group_matcher", None)
    if matcher is None:
        raise ComponentError(
            f"timm model {type(model).__name__} defines no group_matcher, so its layers are unknown",
            where="[backbone] layer_decay", fix="remove layer_decay, or choose a timm model that numbers its layers")
    layers: dict[str, int] = group_parameters(model, matcher(coarse=False), reverse=True)
    return layers


def layer_decay_groups(model: Any, decay: float, *, parent: str) -> list[dict[str, Any]]:
    """One optimizer group per layer: ``{"name": "<parent>.layer<N>", "params", "lr_mult", "parent"}``.

    ``lr_mult`` is ``decay^(L - N)`` for layer ``N`` of ``L + 1``: the top layer trains at the parent's learning
    rate, each layer below at ``decay`` times the one above. Empty layers (every parameter frozen or shared) are
    left out by the engine.
    """
    layer_of = layer_of_parameters(model)
    top = max(layer_of.values(), default=0)
    by_layer: dict[int, list[Any]] = {layer: [] for layer in range(top + 1)}
    for name, param in model.named_parameters():
        by_layer[layer_of[name]].append(param)
    return [{"name": f"{parent}.layer{layer}", "params": params, "lr_mult": decay ** (top - layer), "parent": parent}
            for layer, params in by_layer.items()]

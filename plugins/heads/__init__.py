"""Embedding heads: linear + L2 normalisation, MLP, and named multi-head embeddings.

This module holds the Params, the factories and the registration hook and stays torch-free; the head
modules live in :mod:`.modules`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.errors import ComponentError


class LinearHeadParams(Params):
    """Parameters of the ``linear`` head."""

    embedding_size: int = Field(128, ge=1, description="Embedding dimension D.")
    normalize: bool = Field(True, description="L2-normalise the embedding.")
    bias: bool = Field(True, description="Use a bias in the linear layer.")


class MlpHeadParams(Params):
    """Parameters of the ``mlp`` head."""

    embedding_size: int = Field(128, ge=1, description="Embedding dimension D.")
    hidden: list[int] = Field(default_factory=lambda: [512], description="Hidden layer widths.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout before each hidden activation.")
    normalize: bool = Field(True, description="L2-normalise the embedding.")


class MultiHeadParams(Params):
    """Parameters of the ``multi`` head."""

    heads: dict[str, int] = Field(
        default_factory=lambda: {"discriminative": 128, "shared": 128, "selfsimilarity": 128, "intra": 128},
        description="Named linear heads and their dimensions, in concatenation order.",
    )
    weights: list[float] | None = Field(
        None, description="Weights of the heads in the evaluation embedding (default: all 1)."
    )

    def head_outputs(self) -> tuple[str, ...]:
        """The named heads, in concatenation order: the head returns one embedding per name."""
        return tuple(self.heads)

    @field_validator("heads")
    @classmethod
    def _some_heads(cls, value: dict[str, int]) -> dict[str, int]:
        if not value:
            raise ValueError("name at least one head, e.g. heads = { discriminative = 128 }")
        if any(size < 1 for size in value.values()):
            raise ValueError("every head dimension must be >= 1")
        return value

    @field_validator("weights")
    @classmethod
    def _finite_weights(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and any(not w >= 0 or w == float("inf") for w in value):
            raise ValueError("every weight must be a finite number >= 0")
        if value is not None and value and not any(w > 0 for w in value):
            raise ValueError("at least one weight must be > 0 (the evaluation embedding would be zero)")
        return value

    @model_validator(mode="after")
    def _one_weight_per_head(self) -> MultiHeadParams:
        if self.weights is not None and len(self.weights) != len(self.heads):
            raise ValueError(f"{len(self.weights)} weights for {len(self.heads)} heads "
                             f"({', '.join(self.heads)}): give one weight per head, in that order")
        return self


def build_linear(params: LinearHeadParams, ctx: BuildContext) -> Any:
    """Linear embedding layer on the pooled features."""
    from dmlplug_builtins.heads.modules import LinearHead

    return LinearHead(ctx.require("feature_dim"), params.embedding_size, bias=params.bias, normalize=params.normalize)


def build_mlp(params: MlpHeadParams, ctx: BuildContext) -> Any:
    """MLP embedding head (ReLU between layers)."""
    from dmlplug_builtins.heads.modules import MlpHead

    return MlpHead(ctx.require("feature_dim"), params.embedding_size, params.hidden, dropout=params.dropout,
                   normalize=params.normalize)


def build_multi(params: MultiHeadParams, ctx: BuildContext) -> Any:
    """Several named L2-normalised linear heads; evaluation = weighted concatenation, re-normalised."""
    from dmlplug_builtins.heads.modules import MultiHead

    weights = params.weights or [1.0] * len(params.heads)
    if len(weights) != len(params.heads):  # checked by MultiHeadParams too; kept for hand-made params
        raise ComponentError(f"head 'multi': {len(weights)} weights for {len(params.heads)} heads",
                             where="[head] weights")
    return MultiHead(ctx.require("feature_dim"), params.heads, weights)


@hookimpl
def register_heads(register: Any) -> None:
    """Register the built-in heads."""
    register("linear", build_linear, params=LinearHeadParams, description="Linear layer + L2 normalisation.")
    register("mlp", build_mlp, params=MlpHeadParams, description="MLP + L2 normalisation.")
    register("multi", build_multi, params=MultiHeadParams,
             description="Named heads; evaluation embedding = weighted concatenation (DiVA-style).")

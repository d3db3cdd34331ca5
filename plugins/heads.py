"""Embedding heads: linear + L2 normalisation, MLP, and named multi-head embeddings."""

from __future__ import annotations

from pydantic import Field

from dmlplug import Params, hookimpl


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


def build_linear(params: LinearHeadParams, ctx):
    """Linear embedding layer on the pooled features."""
    from torch import nn
    from torch.nn import functional as F

    class LinearHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(ctx.feature_dim, params.embedding_size, bias=params.bias)
            self.embedding_size = params.embedding_size

        def forward(self, features):
            out = self.fc(features)
            return F.normalize(out, dim=-1) if params.normalize else out

    return LinearHead()


def build_mlp(params: MlpHeadParams, ctx):
    """MLP embedding head (ReLU between layers)."""
    from torch import nn
    from torch.nn import functional as F

    layers, width = [], ctx.feature_dim
    for hidden in params.hidden:
        layers += [nn.Linear(width, hidden), nn.Dropout(params.dropout), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, params.embedding_size))

    class MlpHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(*layers)
            self.embedding_size = params.embedding_size

        def forward(self, features):
            out = self.net(features)
            return F.normalize(out, dim=-1) if params.normalize else out

    return MlpHead()


def build_multi(params: MultiHeadParams, ctx):
    """Several named L2-normalised linear heads; evaluation = weighted concatenation, re-normalised."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    names = list(params.heads)
    weights = params.weights or [1.0] * len(names)
    if len(weights) != len(names):
        from dmlplug.errors import ComponentError

        raise ComponentError(f"head 'multi': {len(weights)} weights for {len(names)} heads", where="[head] weights")

    class MultiHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = nn.ModuleDict({n: nn.Linear(ctx.feature_dim, d) for n, d in params.heads.items()})
            self.embedding_size = sum(params.heads.values())
            self.register_buffer("weights", torch.tensor(weights, dtype=torch.float32))

        def forward(self, features):
            return {n: F.normalize(self.heads[n](features), dim=-1) for n in names}

        def eval_embedding(self, outputs):
            parts = [w * outputs[n] for w, n in zip(self.weights, names, strict=True)]
            return F.normalize(torch.cat(parts, dim=-1), dim=-1)

    return MultiHead()


@hookimpl
def register_heads(register):
    """Register the built-in heads."""
    register("linear", build_linear, params=LinearHeadParams, description="Linear layer + L2 normalisation.")
    register("mlp", build_mlp, params=MlpHeadParams, description="MLP + L2 normalisation.")
    register("multi", build_multi, params=MultiHeadParams, tags=("multi_head",),
             description="Named heads; evaluation embedding = weighted concatenation (DiVA-style).")

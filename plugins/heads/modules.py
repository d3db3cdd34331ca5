"""The head modules: linear, MLP and named multi-head embeddings.

Imported only by the factories in :mod:`dmlplug_builtins.heads` (torch at module level).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class LinearHead(nn.Module):
    """A linear layer on the pooled features, L2-normalised unless ``normalize`` is false.

    Args:
        feature_dim: Size F of the backbone's pooled features.
        embedding_size: Embedding dimension D.
        bias: Use a bias in the linear layer.
        normalize: L2-normalise the embedding.
    """

    def __init__(self, feature_dim: int, embedding_size: int, bias: bool = True, normalize: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(feature_dim, embedding_size, bias=bias)
        self.embedding_size = embedding_size
        self.normalize = normalize

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``B×D`` embeddings of ``B×F`` features."""
        out = self.fc(features)
        return F.normalize(out, dim=-1) if self.normalize else out


class MlpHead(nn.Module):
    """An MLP (linear, dropout, ReLU per hidden layer, then a linear layer to D), L2-normalised by default.

    Args:
        feature_dim: Size F of the backbone's pooled features.
        embedding_size: Embedding dimension D.
        hidden: Hidden layer widths.
        dropout: Dropout before each hidden activation.
        normalize: L2-normalise the embedding.
    """

    def __init__(self, feature_dim: int, embedding_size: int, hidden: list[int], dropout: float = 0.0,
                 normalize: bool = True) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = feature_dim
        for size in hidden:
            layers += [nn.Linear(width, size), nn.Dropout(dropout), nn.ReLU()]
            width = size
        layers.append(nn.Linear(width, embedding_size))
        self.net = nn.Sequential(*layers)
        self.embedding_size = embedding_size
        self.normalize = normalize

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``B×D`` embeddings of ``B×F`` features."""
        out = self.net(features)
        return F.normalize(out, dim=-1) if self.normalize else out


class MultiHead(nn.Module):
    """Several named L2-normalised linear heads (a :class:`dmlplug.protocols.MultiHead`).

    The evaluation embedding is the weighted concatenation of the heads' embeddings, re-normalised.

    Args:
        feature_dim: Size F of the backbone's pooled features.
        heads: Head name -> embedding dimension, in concatenation order.
        weights: Weight of each head in the evaluation embedding (same order).
    """

    weights: torch.Tensor  # a buffer registered in __init__ (nn.Module's __getattr__ types it Tensor | Module)

    def __init__(self, feature_dim: int, heads: dict[str, int], weights: list[float]) -> None:
        super().__init__()
        self.names = list(heads)
        self.heads = nn.ModuleDict({n: nn.Linear(feature_dim, d) for n, d in heads.items()})
        self.embedding_size = sum(heads.values())
        self.output_sizes = dict(heads)
        self.register_buffer("weights", torch.tensor(weights, dtype=torch.float32))

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        """The named embeddings of ``B×F`` features."""
        return {n: F.normalize(self.heads[n](features), dim=-1) for n in self.names}

    def eval_embedding(self, outputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The evaluation embedding: weighted concatenation of the named embeddings, re-normalised."""
        parts = [w * outputs[n] for w, n in zip(self.weights, self.names, strict=True)]
        return F.normalize(torch.cat(parts, dim=-1), dim=-1)

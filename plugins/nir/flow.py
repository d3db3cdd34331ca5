"""The conditional normalizing flow of NIR, built from ``nflows`` parts.

Reference architecture (docs/methods/nir.md, FrEIA ``GraphINN`` in the NIR code): ``n_blocks`` times a fixed random
permutation followed by one GLOW coupling block, every block conditioned on the same context vector (the
normalised class proxy). A GLOW block is two affine couplings with complementary halves, so here it is two
:class:`ClampedAffineCoupling` transforms.

Imported only by the NIR factory: it imports torch and nflows at module level.
"""

from __future__ import annotations

import numpy as np
import torch
from nflows.transforms.base import CompositeTransform
from nflows.transforms.coupling import AffineCouplingTransform
from nflows.transforms.permutations import Permutation
from torch import nn

# FrEIA's soft clamp uses 0.636 (≈ 2/π) literally; kept as is so scales match the reference code.
_ATAN_SCALE = 0.636


class ClampedAffineCoupling(AffineCouplingTransform):
    """Affine coupling whose scale is ``exp(clamp · 0.636 · atan(raw))``, as in FrEIA's GLOW block.

    nflows 0.14's own scale is ``sigmoid(raw + 2) + 1e-3`` (never above 1.001): it can only contract,
    while NIR must expand unit-sphere coordinates (about ±0.09) towards N(0, 1). The soft clamp bounds the
    log-scale to ``(-clamp, clamp)`` per coordinate, which keeps the exponentiated loss from exploding.

    Args:
        mask: 1-D mask; coordinates with ``mask > 0`` are transformed, the others condition the transform.
        transform_net_create_fn: ``fn(num_identity, num_transform * 2) -> net`` with ``net(x, context)``.
        clamp: Bound of the log-scale.
    """

    def __init__(self, mask, transform_net_create_fn, clamp: float = 2.0):
        super().__init__(mask, transform_net_create_fn)
        self.clamp = float(clamp)

    def _scale_and_shift(self, transform_params):
        # nflows' layout: the first half of the net output is the shift, the second the raw log-scale.
        n = self.num_transform_features
        shift, raw = transform_params[:, :n, ...], transform_params[:, n:, ...]
        scale = torch.exp(self.clamp * _ATAN_SCALE * torch.atan(raw))
        return scale, shift


class ConditionalMLP(nn.Module):
    """Plain ReLU MLP applied to ``cat([x, context])``: the coupling subnet of the NIR reference.

    nflows' ``ResidualNet`` zero-initialises its last layer and gates the context with a GLU; the reference
    uses neither, so this is written out.

    Args:
        in_features: Size of ``x`` (the coupling's identity half).
        context_features: Size of the context vector (0 for an unconditional subnet).
        out_features: Output size (twice the transformed half: shift and raw log-scale).
        depth: Number of Linear layers (at least 1).
        width: Hidden width.
    """

    def __init__(self, in_features: int, context_features: int, out_features: int, depth: int, width: int):
        super().__init__()
        if depth < 1:
            raise ValueError("subnet depth must be at least 1")
        sizes = [in_features + context_features] + [width] * (depth - 1) + [out_features]
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            if i > 0:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(n_in, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """Map ``x`` (and ``context``, when given) to the coupling parameters."""
        return self.net(x if context is None else torch.cat([x, context], dim=1))


def build_conditional_flow(
    features: int,
    context_features: int,
    *,
    n_blocks: int = 5,
    subnet_depth: int = 8,
    subnet_width: int = 128,
    clamp: float = 2.0,
    permutation_seed: int = 0,
) -> CompositeTransform:
    """Build NIR's conditional flow; ``flow(x, context=c)`` returns ``(z, logabsdet)`` (data → latent).

    Args:
        features: Dimension of the flowed vectors (the embedding size D).
        context_features: Dimension of the context (the proxy size).
        n_blocks: Number of (permutation, GLOW block) pairs.
        subnet_depth: Linear layers per coupling subnet.
        subnet_width: Hidden width of the coupling subnets.
        clamp: Soft clamp of the log-scales.
        permutation_seed: Block ``k`` uses ``numpy.random.RandomState(permutation_seed + k)``; a private
            generator, so building a flow never disturbs the global numpy RNG (FrEIA's ``PermuteRandom``
            reseeds it).

    Returns:
        An nflows ``CompositeTransform`` with ``forward(x, context)`` and ``inverse(z, context)``.
    """
    if features < 2:
        raise ValueError("a coupling flow needs at least 2 features")
    half = round(features / 2)
    first_half = torch.zeros(features, dtype=torch.int64)
    first_half[:half] = 1

    def make_subnet(num_identity: int, num_params: int) -> nn.Module:
        return ConditionalMLP(num_identity, context_features, num_params, subnet_depth, subnet_width)

    layers = []
    for k in range(n_blocks):
        permutation = np.random.RandomState(permutation_seed + k).permutation(features)
        layers += [
            Permutation(torch.as_tensor(permutation, dtype=torch.int64)),
            # GLOW block: transform the first half given the second, then the second given the new first.
            ClampedAffineCoupling(first_half, make_subnet, clamp=clamp),
            ClampedAffineCoupling(1 - first_half, make_subnet, clamp=clamp),
        ]
    return CompositeTransform(layers)

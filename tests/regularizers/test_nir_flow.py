"""NIR's conditional flow: invertibility, exact log-determinant, parameter-count oracle, permutations."""

import math

import numpy as np
import pytest
import torch
from nflows.transforms.coupling import AffineCouplingTransform
from nflows.transforms.permutations import Permutation

from dmlplug_builtins.nir.flow import (
    ClampedAffineCoupling,
    ConditionalMLP,
    build_conditional_flow,
)


def _inputs(batch, features, context_features, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.nn.functional.normalize(torch.randn(batch, features, generator=generator), dim=1)
    c = torch.nn.functional.normalize(torch.randn(batch, context_features, generator=generator), dim=1)
    return x, c


@pytest.mark.parametrize(("features", "context_features"), [(8, 8), (7, 5), (128, 128)])
def test_inverse_of_forward_is_identity(features, context_features):
    torch.manual_seed(0)
    flow = build_conditional_flow(features, context_features)
    x, c = _inputs(16, features, context_features)
    with torch.no_grad():
        z, logdet = flow(x, context=c)
        x_back, inverse_logdet = flow.inverse(z, context=c)
    assert not torch.allclose(z, x, atol=1e-2)  # the flow does something
    torch.testing.assert_close(x_back, x, atol=1e-5, rtol=0)
    torch.testing.assert_close(inverse_logdet, -logdet, atol=1e-4, rtol=1e-5)


def test_logdet_equals_slogdet_of_the_autograd_jacobian():
    torch.manual_seed(1)
    features = 8
    flow = build_conditional_flow(features, 6).double()
    x, c = _inputs(5, features, 6, seed=3)
    x, c = x.double(), c.double()
    _, logdet = flow(x, context=c)
    for b in range(len(x)):
        def latent(v, b=b):
            return flow(v.unsqueeze(0), context=c[b:b + 1])[0].squeeze(0)

        jacobian = torch.autograd.functional.jacobian(latent, x[b])
        sign, logabsdet = torch.linalg.slogdet(jacobian)
        assert sign.item() != 0
        assert logdet[b].item() == pytest.approx(logabsdet.item(), abs=1e-9)
    # The check only means something if the flow is far from volume-preserving.
    assert logdet.abs().max().item() > 0.05


@pytest.mark.parametrize(("features", "expected"), [(128, 1_402_880), (512, 2_635_520)])
def test_parameter_count_oracle(features, expected):
    flow = build_conditional_flow(features, features, n_blocks=5, subnet_depth=8, subnet_width=128)
    assert sum(p.numel() for p in flow.parameters() if p.requires_grad) == expected


def test_soft_clamp_bounds_the_log_scale_and_allows_expansion():
    coupling = ClampedAffineCoupling([1, 1, 0, 0], lambda n_in, n_out: ConditionalMLP(n_in, 0, n_out, 2, 4),
                                     clamp=2.0)
    # nflows' parameter layout for two transformed features: [shift_0, shift_1, raw_0, raw_1].
    params = torch.tensor([[0.3, -0.2, -1e4, 1e4], [0.0, 0.0, 1.0, 0.0]])
    scale, shift = coupling._scale_and_shift(params)
    supremum = math.exp(2.0 * 0.636 * math.pi / 2)  # the soft clamp's bound, just under e^2
    assert scale[0, 0].item() == pytest.approx(1 / supremum, rel=1e-3)
    assert scale[0, 1].item() == pytest.approx(supremum, rel=1e-3)
    assert scale[1, 0].item() == pytest.approx(math.exp(2.0 * 0.636 * math.atan(1.0)), rel=1e-6)
    assert scale[1, 1].item() == 1.0
    assert shift[0].tolist() == pytest.approx([0.3, -0.2])
    # nflows' default scale sigmoid(raw + 2) + 1e-3 stays at or below 1.001: only the override can expand.
    default, _ = AffineCouplingTransform._scale_and_shift(coupling, params)
    assert default.max().item() == pytest.approx(1.001, abs=1e-6)
    assert scale.max().item() > 7.0


def test_glow_block_structure_and_private_permutations():
    np.random.seed(123)
    expected_draw = np.random.rand()
    np.random.seed(123)
    flow = build_conditional_flow(10, 3, n_blocks=3, subnet_depth=4, subnet_width=16, permutation_seed=7)
    assert np.random.rand() == expected_draw  # the global numpy RNG was not touched

    layers = list(flow._transforms)
    assert len(layers) == 9
    for k in range(3):
        permutation, first, second = layers[3 * k: 3 * k + 3]
        assert isinstance(permutation, Permutation)
        assert permutation._permutation.tolist() == np.random.RandomState(7 + k).permutation(10).tolist()
        assert first.transform_features.tolist() == [0, 1, 2, 3, 4]
        assert second.transform_features.tolist() == [5, 6, 7, 8, 9]
        linears = [m for m in first.transform_net.modules() if isinstance(m, torch.nn.Linear)]
        assert [(m.in_features, m.out_features) for m in linears] == [(5 + 3, 16), (16, 16), (16, 16), (16, 10)]
        assert sum(isinstance(m, torch.nn.ReLU) for m in first.transform_net.modules()) == 3


def test_context_changes_the_output():
    torch.manual_seed(0)
    flow = build_conditional_flow(8, 4)
    x, c = _inputs(4, 8, 4)
    with torch.no_grad():
        z1, _ = flow(x, context=c)
        z2, _ = flow(x, context=-c)
    assert (z1 - z2).abs().max().item() > 1e-3

"""Contract checks of optimizers, learning-rate schedules and augmentation policies."""

from __future__ import annotations

import copy
from typing import Any

from dmlplug.plugins import PluginHost
from dmlplug.testing.fixtures import IMAGE_SIZE, build, expect, load_host, make_context

#: Learning rates of the two parameter groups the checks train.
GROUP_LRS = (0.1, 0.01)


def _groups() -> list[dict[str, Any]]:
    """Two named groups, as the engine hands them to an optimizer factory."""
    import torch

    torch.manual_seed(0)
    return [{"name": name, "params": [torch.nn.Parameter(torch.randn(4))], "lr": lr, "weight_decay": 0.0}
            for name, lr in zip(("first", "second"), GROUP_LRS, strict=True)]


def _quadratic(groups: list[dict[str, Any]]) -> Any:
    return sum((p ** 2).sum() for group in groups for p in group["params"])


def check_optimizer(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """An optimizer keeps the engine's named groups, lowers a quadratic, and resumes exactly from its state.

    The groups keep their ``name`` and their ``lr`` (the engine logs and schedules them by name); ten steps on
    ``Σ p²`` lower it; a copy restored with ``load_state_dict`` takes the same next step as the original.
    """
    import torch

    host = host or load_host()
    groups = _groups()
    optimizer = build("optimizers", name, make_context(host, param_groups=groups), **(params or {}))
    expect([g.get("name") for g in optimizer.param_groups] == ["first", "second"],
           f"optimizer {name!r}: parameter groups lost their names")
    expect([g["lr"] for g in optimizer.param_groups] == list(GROUP_LRS),
           f"optimizer {name!r}: changed the groups' learning rates")
    start = float(_quadratic(groups).detach())
    for _ in range(10):
        optimizer.zero_grad()
        _quadratic(groups).backward()
        optimizer.step()
    expect(float(_quadratic(groups).detach()) < start, f"optimizer {name!r}: ten steps did not lower a quadratic")
    twin_groups = [{**g, "params": [torch.nn.Parameter(p.detach().clone()) for p in g["params"]]} for g in groups]
    twin = build("optimizers", name, make_context(host, param_groups=twin_groups), **(params or {}))
    twin.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    for opt, grps in ((optimizer, groups), (twin, twin_groups)):
        opt.zero_grad()
        _quadratic(grps).backward()
        opt.step()
    same = all(torch.equal(a, b) for g, h in zip(groups, twin_groups, strict=True)
               for a, b in zip(g["params"], h["params"], strict=True))
    expect(same, f"optimizer {name!r}: a copy restored from state_dict() takes another step")


def check_lr_schedule(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None,
                      epochs: int = 6) -> None:
    """A schedule gives finite, non-negative rates every epoch and resumes exactly from its state.

    It is stepped with a selection metric that improves, then stalls (``None`` at one epoch, as when no
    evaluation ran); a fresh schedule restored from ``state_dict()`` halfway gives the same rates afterwards.
    """
    import math

    import torch

    host = host or load_host()
    expect(epochs >= 2, "check_lr_schedule needs epochs >= 2 (it resumes halfway)")
    metrics = ([0.1, 0.2, None] + [0.3] * epochs)[:epochs]

    def fresh() -> tuple[Any, Any]:
        optimizer = torch.optim.SGD(_groups(), lr=GROUP_LRS[0])
        ctx = make_context(host, optimizer=optimizer, epochs=epochs)
        return optimizer, build("lr_schedules", name, ctx, **(params or {}))

    optimizer, schedule = fresh()
    rates: list[list[float]] = []
    state: dict[str, Any] = {}
    for epoch, metric in enumerate(metrics):
        optimizer.step()  # an epoch of training comes first (torch warns about a schedule stepped before it)
        schedule.step_epoch(metric)
        rates.append([g["lr"] for g in optimizer.param_groups])
        expect(all(math.isfinite(r) and r >= 0 for r in rates[-1]),
               f"lr schedule {name!r}: rate(s) {rates[-1]} after epoch {epoch + 1}")
        if epoch == epochs // 2 - 1:
            state = copy.deepcopy(schedule.state_dict())
            optimizer_state = copy.deepcopy(optimizer.state_dict())
    resumed_optimizer, resumed = fresh()
    resumed_optimizer.load_state_dict(optimizer_state)
    resumed.load_state_dict(state)
    for epoch, metric in list(enumerate(metrics))[epochs // 2:]:
        resumed_optimizer.step()
        resumed.step_epoch(metric)
        got = [g["lr"] for g in resumed_optimizer.param_groups]
        expect(got == rates[epoch], f"lr schedule {name!r}: resumed from its state, epoch {epoch + 1} gives {got}, "
                                    f"not {rates[epoch]}")


def check_augmentation(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A policy turns an RGB image of any size into a finite ``3×S×S`` float tensor, reproducibly under a seed.

    The engine seeds the generators the policy draws from per sample before the transform runs (exact
    resume): ``random``, numpy and torch, or only those its ``random_sources`` names
    (:class:`~dmlplug.protocols.HasRandomSources`). The same seeds of those must give the same tensor, whatever
    state the other generators are in.
    """
    import random

    import numpy as np
    import torch
    from PIL import Image

    from dmlplug.data.transforms import random_sources
    from dmlplug.engine.seeding import seed_sample

    host = host or load_host()
    transform = build("augmentations", name, make_context(host, image_size=IMAGE_SIZE), **(params or {}))
    sources = random_sources(transform)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (13, 11, 3), dtype=np.uint8))
    outputs = []
    for other_state in (5, 6):
        # the generators the policy does not declare are left in different states on the two calls
        random.seed(other_state)
        np.random.seed(other_state)
        torch.manual_seed(other_state)
        seed_sample(3, sources)
        outputs.append(transform(image))
    out = outputs[0]
    expect(isinstance(out, torch.Tensor) and tuple(out.shape) == (3, IMAGE_SIZE, IMAGE_SIZE)
           and out.is_floating_point() and bool(torch.isfinite(out).all()),
           f"augmentation {name!r}: expected a finite float 3×{IMAGE_SIZE}×{IMAGE_SIZE} tensor, got "
           f"{getattr(out, 'shape', type(out))}")
    expect(torch.equal(outputs[0], outputs[1]),
           f"augmentation {name!r}: not reproducible under the same seeds of {sorted(sources)} (a policy that draws "
           "from another generator must name it in random_sources)")

"""Scaffold templates of the data and optimisation kinds: datasets, samplers, augmentations, optimizers, schedules."""

from __future__ import annotations

from dmlplug.scaffold.template import KindTemplate

DATASET = KindTemplate(
    suffix="blobs", module="dataset", class_suffix="Blobs",
    description="Synthetic coloured squares, one colour per class (made in memory, never downloaded).",
    params='''
classes: int = Field(8, ge=4, description="Classes; the first half train, the second half test.")
per_class: int = Field(10, ge=2, description="Images of every class.")
size: int = Field(16, ge=4, description="Side of the square images.")
seed: int = Field(0, description="Seed of the noise.")
''',
    factory="return $Class(params.classes, params.per_class, params.size, params.seed).bundle()",
    implementation='''"""The ``$name`` dataset (imported only by the factory)."""

from __future__ import annotations

import numpy as np

from dmlplug.data import ArraySource, DatasetBundle


class $Class:
    """Images of one colour per class with a little noise; the classes' first half trains, the second tests.

    Args:
        classes: Number of classes.
        per_class: Images of every class.
        size: Side of the images.
        seed: Seed of the colours and the noise.
    """

    def __init__(self, classes: int, per_class: int, size: int, seed: int):
        self.classes, self.per_class, self.size, self.seed = classes, per_class, size, seed

    def _split(self, first: int, last: int, name: str) -> ArraySource:
        rng = np.random.default_rng([self.seed, first])
        colours = np.random.default_rng(self.seed).integers(0, 256, (self.classes, 3))
        labels = np.repeat(np.arange(last - first), self.per_class)
        noise = rng.integers(-10, 11, (len(labels), self.size, self.size, 3))
        images = np.clip(colours[first + labels][:, None, None, :] + noise, 0, 255).astype(np.uint8)
        return ArraySource(images, labels, [f"colour{c}" for c in range(first, last)], name=name)

    def bundle(self) -> DatasetBundle:
        """The train and test splits."""
        half = self.classes // 2
        return DatasetBundle(train=self._split(0, half, "$name/train"),
                             test=self._split(half, self.classes, "$name/test"), default_augment="light")
''',
    tests='''
import numpy as np

import $module
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_known_sizes_and_one_colour_per_class():
    data = build("$kind", "$name", host=load_host($module), classes=6, per_class=3, size=8)
    assert len(data.train) == len(data.test) == 9
    assert data.train.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    means = [np.asarray(data.test.load_image(i), dtype=float).mean(axis=(0, 1)) for i in range(9)]
    assert np.allclose(means[0], means[1], atol=4) and not np.allclose(means[0], means[3], atol=4)
''',
    recipe='''
[data.dataset]
name = "$name"
classes = 8
''')

SAMPLER = KindTemplate(
    suffix="class_groups", module="sampler", class_suffix="Sampler",
    description="Batches of batch_size / per_class classes, per_class images of each.",
    params='''
per_class: int = Field(2, ge=1, description="Images of every class in a batch (a divisor of the batch size).")

def per_class_in_batch(self) -> int:
    """``per_class`` images of every class in a batch (dmlplug validate checks it against the data)."""
    return self.per_class
''',
    factory="return $Class(ctx.require(\"train_labels\"), ctx.require(\"batch_size\"), params.per_class, ctx.seed)",
    implementation='''"""The ``$name`` sampler (imported only by the factory)."""

from __future__ import annotations

import numpy as np


class $Class:
    """Batches of ``batch_size // per_class`` classes with ``per_class`` images each; ``len`` = batches per epoch.

    The batches are a function of the seed and the epoch (``set_epoch``), as dmlplug's resume needs.

    Args:
        labels: The training labels.
        batch_size: Images per batch.
        per_class: Images of every class in a batch.
        seed: The run's seed.
    """

    def __init__(self, labels, batch_size: int, per_class: int, seed: int):
        self.labels = np.asarray(labels)
        self.batch_size, self.per_class = batch_size, per_class
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Draw the batches of ``epoch``."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.labels) // self.batch_size

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        classes = np.unique(self.labels)
        for _ in range(len(self)):
            wanted = self.batch_size // self.per_class
            chosen = rng.choice(classes, wanted, replace=len(classes) < wanted)
            batch = []
            for c in chosen:
                members = np.flatnonzero(self.labels == c)
                batch += rng.choice(members, self.per_class, replace=len(members) < self.per_class).tolist()
            yield [int(i) for i in batch]
''',
    tests='''
import numpy as np

import $module
from dmlplug.testing import build, check_plugin, load_host, make_context


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_every_batch_holds_two_of_each_of_its_classes():
    host = load_host($module)
    labels = np.repeat(np.arange(10), 5)
    ctx = make_context(host, train_labels=labels, batch_size=8, seed=1)
    sampler = build("$kind", "$name", ctx=ctx, host=host)
    sampler.set_epoch(1)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 6
    for batch in batches:
        assert sorted(np.bincount(labels[batch])[np.bincount(labels[batch]) > 0]) == [2, 2, 2, 2]
''',
    recipe='''
[data.sampler]
name = "$name"
''')

AUGMENTATION = KindTemplate(
    suffix="flip", module="augmentation", class_suffix="Flip",
    description="Resize to the network's input, flip horizontally with probability p, normalise.",
    params='''
p: float = Field(0.5, ge=0, le=1, description="Probability of a horizontal flip.")
''',
    factory="return $Class(ctx.require(\"image_size\"), params.p)",
    implementation='''"""The ``$name`` augmentation policy (imported only by the factory)."""

from __future__ import annotations

import torch
from torchvision.transforms import functional as F

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # ImageNet's, as the backbones were trained with


class $Class:
    """PIL image -> normalised ``3×S×S`` tensor, flipped left-right with probability ``p`` (torch's generator).

    Args:
        image_size: Side S of the network input.
        p: Flip probability.
    """

    def __init__(self, image_size: int, p: float):
        self.image_size, self.p = image_size, p

    def __call__(self, image):
        """The augmented, normalised tensor of ``image``."""
        tensor = F.to_tensor(F.resize(image, [self.image_size, self.image_size]))
        if torch.rand(()) < self.p:
            tensor = tensor.flip(-1)
        return F.normalize(tensor, MEAN, STD)
''',
    tests='''
import numpy as np
import torch
from PIL import Image

import $module
from dmlplug.testing import build, check_plugin, load_host, make_context


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_p_one_always_flips_and_p_zero_never():
    host = load_host($module)
    image = Image.fromarray(np.arange(4 * 4 * 3, dtype=np.uint8).reshape(4, 4, 3))
    ctx = make_context(host, image_size=4)
    flipped = build("$kind", "$name", ctx=ctx, host=host, p=1.0)(image)
    kept = build("$kind", "$name", ctx=ctx, host=host, p=0.0)(image)
    assert flipped.shape == (3, 4, 4) and torch.equal(flipped, kept.flip(-1))
''',
    recipe='''
[data]
augment = "$name"
''')

OPTIMIZER = KindTemplate(
    suffix="sign_sgd", module="optimizer", class_suffix="SignSGD",
    description="signSGD: every parameter moves by lr against the sign of its gradient.",
    params='''
momentum: float = Field(0.0, ge=0, lt=1, description="Momentum of the gradient before its sign is taken.")
''',
    factory="return $Class(ctx.require(\"param_groups\"), momentum=params.momentum)",
    implementation='''"""The ``$name`` optimizer (imported only by the factory)."""

from __future__ import annotations

import torch


class $Class(torch.optim.Optimizer):
    """``p -= lr·sign(m)``, ``m`` the gradient with momentum (and decoupled weight decay).

    Args:
        groups: The engine's named parameter groups (``name``, ``params``, ``lr``, ``weight_decay``).
        momentum: Momentum of the gradient.
    """

    def __init__(self, groups, momentum: float = 0.0):
        super().__init__(groups, {"lr": 1e-3, "weight_decay": 0.0, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):
        """One step of every parameter with a gradient."""
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                buffer = state.setdefault("momentum", torch.zeros_like(p))
                buffer.mul_(group["momentum"]).add_(p.grad)
                p.mul_(1 - group["lr"] * group["weight_decay"]).sub_(group["lr"] * buffer.sign())
        return loss
''',
    tests='''
import torch

import $module
from dmlplug.testing import build, check_plugin, load_host, make_context


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_one_step_moves_by_lr_against_the_sign():
    host = load_host($module)
    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    groups = [{"name": "head", "params": [weight], "lr": 0.5, "weight_decay": 0.0}]
    optimizer = build("$kind", "$name", ctx=make_context(host, param_groups=groups), host=host)
    (weight * torch.tensor([2.0, -3.0, 0.0])).sum().backward()
    optimizer.step()
    assert weight.tolist() == [0.5, -1.5, 3.0]  # sign(0) = 0: the last one stays
''',
    recipe='''
[optimizer]
name = "$name"
lr = 1e-3
''')

LR_SCHEDULE = KindTemplate(
    suffix="halving", module="schedule", class_suffix="Halving",
    description="Halve every group's learning rate every `every` epochs.",
    params='''
every: int = Field(10, ge=1, description="Epochs between two halvings.")
''',
    factory="return $Class(ctx.require(\"optimizer\"), params.every)",
    implementation='''"""The ``$name`` learning-rate schedule (imported only by the factory)."""

from __future__ import annotations


class $Class:
    """After every ``every`` epochs, each group's learning rate is half its starting rate to that power.

    Args:
        optimizer: The run's optimizer.
        every: Epochs between two halvings.
    """

    def __init__(self, optimizer, every: int):
        self.optimizer, self.every = optimizer, every
        self.start = [group["lr"] for group in optimizer.param_groups]
        self.epoch = 0

    def step_epoch(self, metric):
        """Advance one epoch (the selection metric is not used)."""
        self.epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.start, strict=True):
            group["lr"] = lr * 0.5 ** (self.epoch // self.every)

    def state_dict(self):
        """What a checkpoint keeps."""
        return {"epoch": self.epoch, "start": list(self.start)}

    def load_state_dict(self, state):
        """Continue from a checkpoint."""
        self.epoch, self.start = state["epoch"], list(state["start"])
''',
    tests='''
import torch

import $module
from dmlplug.testing import build, check_plugin, load_host, make_context


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_the_rate_halves_every_two_epochs():
    host = load_host($module)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.8)
    ctx = make_context(host, optimizer=optimizer, epochs=6)
    schedule = build("$kind", "$name", ctx=ctx, host=host, every=2)
    rates = []
    for _ in range(5):
        schedule.step_epoch(None)
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == [0.8, 0.4, 0.4, 0.2, 0.2]
''',
    recipe='''
[scheduler]
name = "$name"
every = 10
''')

TEMPLATES = {"datasets": DATASET, "samplers": SAMPLER, "augmentations": AUGMENTATION, "optimizers": OPTIMIZER,
             "lr_schedules": LR_SCHEDULE}

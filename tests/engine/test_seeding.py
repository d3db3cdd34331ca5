"""Per-sample augmentation seeds: a pure function of (run seed, epoch, position), cheap, and side-effect free."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from dmlplug.engine.seeding import SeededDataset, SeededIndex, sample_seed, seed_sample, splitmix64


def test_splitmix64_matches_the_reference_generator():
    # Outputs of Vigna's reference splitmix64 seeded with 1234567 (the state advances by the golden gamma).
    state, outputs = 1234567, []
    for _ in range(5):
        outputs.append(splitmix64(state))
        state = (state + 0x9E3779B97F4A7C15) % 2**64
    assert outputs == [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431,
                       16408922859458223821]
    assert splitmix64(0) == 0xE220A8397B1DCDAF


def test_sample_seed_is_a_63_bit_function_of_its_arguments_only():
    seeds = {(s, e, p): sample_seed(s, e, p) for s in (0, 1, 7) for e in range(4) for p in range(64)}
    assert len(set(seeds.values())) == len(seeds)  # no two (seed, epoch, position) share a seed
    assert all(0 <= v < 2**63 for v in seeds.values())
    assert all(sample_seed(*key) == value for key, value in seeds.items())
    # the chain, spelled out: each argument folded into a splitmix64 hash of the previous ones
    assert sample_seed(3, 1, 5) == splitmix64(splitmix64(splitmix64(3) ^ 1) ^ 5) >> 1


class _Draws(torch.utils.data.Dataset):
    """A 'transform' that draws from all three global generators, plus the real DML train transform."""

    def __init__(self):
        from PIL import Image

        from dmlplug.data.transforms import build_transform

        self.transform = build_transform("train", augment="dml", image_size=16)
        grid = np.arange(40 * 30 * 3, dtype=np.uint32).reshape(30, 40, 3) % 251
        self.image = Image.fromarray(grid.astype(np.uint8))

    def __len__(self):
        return 6

    def __getitem__(self, index):
        image = self.transform(self.image)
        extra = torch.tensor([random.random(), float(np.random.rand()), float(torch.rand(()))], dtype=torch.float64)
        return image + index, extra


def _expected(dataset, index, seed):
    """The item computed by hand: seed the three generators, call the dataset."""
    seed_sample(seed)
    return dataset[index]


def _seeded_batches(seed=5, epoch=2):
    positions = [[0, 1, 2], [3, 4, 5]]
    order = [[4, 0, 5], [1, 3, 2]]
    return [[SeededIndex(i, sample_seed(seed, epoch, p)) for i, p in zip(b, ps, strict=True)]
            for b, ps in zip(order, positions, strict=True)]


@pytest.mark.parametrize("workers", [0, 2])
def test_augmentation_is_a_pure_function_of_the_seed_whatever_the_loading_order_or_worker(workers):
    raw = _Draws()
    batches = _seeded_batches()
    loader = torch.utils.data.DataLoader(SeededDataset(raw), batch_sampler=batches, num_workers=workers)
    loaded = [(images, extra) for images, extra in loader]
    for (images, extra), batch in zip(loaded, batches, strict=True):
        for slot, index in enumerate(batch):
            want_image, want_extra = _expected(raw, int(index), index.seed)
            assert torch.equal(images[slot], want_image)
            assert torch.equal(extra[slot], want_extra)
    # the same (index, seed) one at a time, in reverse order, gives the same items
    single = SeededDataset(raw)
    flat = [i for b in batches for i in b]
    for index in reversed(flat):
        image, extra = single[index]
        b, slot = divmod(flat.index(index), 3)
        assert torch.equal(image, loaded[b][0][slot]) and torch.equal(extra, loaded[b][1][slot])
    # and the seeds matter: different seeds give different draws
    assert not torch.equal(loaded[0][1][0], loaded[0][1][1])


def test_loading_without_workers_leaves_the_global_streams_undisturbed():
    def draws():
        return random.random(), float(np.random.rand()), float(np.random.randn()), float(torch.rand(()))

    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    np.random.randn()  # leaves a cached gaussian in numpy's state: it must survive too
    reference = draws()

    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    np.random.randn()
    # the loader gets its own generator, as the engine's does: without one it draws its base seed from torch's
    loader = torch.utils.data.DataLoader(SeededDataset(_Draws()), batch_sampler=_seeded_batches(), num_workers=0,
                                         generator=torch.Generator().manual_seed(0))
    for _ in loader:
        pass
    assert draws() == reference


def test_per_sample_seeding_does_not_seed_cuda(monkeypatch):
    # torch.manual_seed would also seed every CUDA device (slow, and it would reset the training's CUDA stream)
    def refuse(*_args, **_kwargs):
        raise AssertionError("a CUDA generator was seeded")

    monkeypatch.setattr(torch.cuda, "manual_seed_all", refuse)
    monkeypatch.setattr(torch.cuda, "manual_seed", refuse)
    dataset = SeededDataset(_Draws())
    dataset.__getitems__(_seeded_batches()[0])


def test_plain_indices_pass_through_unseeded():
    raw = _Draws()
    torch.manual_seed(4)
    random.seed(4)
    np.random.seed(4)
    want = raw[2]
    torch.manual_seed(4)
    random.seed(4)
    np.random.seed(4)
    got = SeededDataset(raw)[2]
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])

"""Scaffold template of an index codec (``dmlplug plugin new NAME --kind index_codec``)."""

from __future__ import annotations

from dmlplug.scaffold.template import KindTemplate

INDEX_CODEC = KindTemplate(
    suffix="sq", module="codec", class_suffix="Codec", typing_names=("Literal",),
    description="faiss scalar quantisation at 4, 6 or 8 bits a coordinate (bits/8 bytes each, and the id).",
    params='''
bits: Literal[4, 6, 8] = Field(4, description="Bits a coordinate: 4, 6 or 8.")
''',
    factory="return $Class(params.bits)",
    implementation='''"""The ``$name`` index codec (imported only by the factory)."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

INDEX_FILE = "index.faiss"
TRAINING_SAMPLE = 65_536  # the per-coordinate ranges need no more


class $Class:
    """Each coordinate quantised over its trained range; faiss's ``IDMap,SQ<bits>`` (a dmlplug ``IndexCodec``).

    Args:
        bits: Bits a coordinate (4, 6 or 8).
    """

    exact = False
    removable = True
    keeps_floats = False

    def __init__(self, bits: int = 4):
        self.bits = bits

    def plan(self, n, dim, k):
        """What index.json records."""
        return {"bits": self.bits}

    def budget_plans(self, n, dim, k):
        """One plan: dmlplug index --budget may choose it."""
        return [self.plan(n, dim, k)]

    def bytes_floor(self, dim, plan):
        """The code (whole bytes) and the 8-byte id."""
        return float(-(-dim * plan["bits"] // 8) + 8)

    def training_rows(self, n, plan):
        """The ranges are trained on a sample."""
        return min(n, TRAINING_SAMPLE)

    def new_index(self, dim, plan):
        """An empty labelled scalar quantiser."""
        return faiss.index_factory(dim, f"IDMap,SQ{plan['bits']}", faiss.METRIC_INNER_PRODUCT)

    def reconstruct(self, index, labels):
        """Never asked (keeps_floats is false): the codes are lossy."""
        raise ValueError("$name keeps codes, not the float32 vectors")

    def sizes(self, index):
        """The serialized index, in memory and on disk."""
        size = len(faiss.serialize_index(index))
        return size, size

    def save(self, index, folder: Path):
        """``index.faiss``."""
        faiss.write_index(index, str(folder / INDEX_FILE))
        return [INDEX_FILE]

    def load(self, folder: Path, plan):
        """``index.faiss``, checked to be a labelled scalar quantiser of ``plan``'s bits."""
        index = faiss.read_index(str(folder / INDEX_FILE))
        inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap) else index
        wanted = getattr(faiss.ScalarQuantizer, f"QT_{plan['bits']}bit")
        if not isinstance(inner, faiss.IndexScalarQuantizer) or inner.sq.qtype != wanted:
            raise ValueError(f"a {type(inner).__name__} of {index.ntotal} {index.d}-d vectors")
        return index


def unit_rows(count, dim, seed=0):
    """Random unit vectors (for the tests)."""
    x = np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)
''',
    tests='''
import numpy as np
import pytest

import $module
from dmlplug.testing import build, check_plugin, load_host
from $module.codec import unit_rows


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


@pytest.mark.parametrize(("bits", "floor"), [(4, 16 + 8), (6, 24 + 8), (8, 32 + 8)])
def test_bytes_and_near_duplicates(bits, floor):
    codec = build("$kind", "$name", host=load_host($module), bits=bits)
    gallery = unit_rows(400, 32)
    plan = codec.plan(len(gallery), 32, 10)
    assert codec.bytes_floor(32, plan) == floor
    index = codec.new_index(32, plan)
    index.train(gallery)
    index.add_with_ids(gallery, np.arange(400, dtype=np.int64))
    _, rows = index.search(gallery[:40] + 0.01 * unit_rows(40, 32, seed=1), 1)
    assert (rows[:, 0] == np.arange(40)).mean() >= 0.95
''',
    recipe='''
dmlplug index BUNDLE GALLERY --out INDEX --codec $name:bits=4
''')

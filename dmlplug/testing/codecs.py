"""Contract check of index codecs (``dmlplug index --codec``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlplug.testing.fixtures import build, expect, load_host, make_context

if TYPE_CHECKING:
    from dmlplug.plugins import PluginHost


def check_index_codec(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A codec's index, built as ``dmlplug index`` builds it, searches, removes, saves and loads as it says.

    On 600 clustered 16-d unit vectors: the plan is JSON data; the index trains on ``training_rows`` of them,
    takes them labelled by row, and answers ``search`` with ``Q×k`` similarities and labels (rows it holds, ``-1``
    only for slots it could not fill); most queries (gallery items) find an item of their cluster first; a
    removable index
    never returns a removed row; what ``save`` writes ``load`` reads back to the same answers; ``sizes`` are two
    non-negative byte counts and ``bytes_floor`` is positive.
    """
    import json

    import numpy as np

    host = host or load_host()
    codec = build("index_codecs", name, make_context(host), **(params or {}))
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(20), 30)
    x = rng.normal(size=(600, 16)) + 3.0 * rng.normal(size=(20, 16))[labels]
    gallery = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    plan = codec.plan(len(gallery), 16, 10)
    json.dumps(plan)  # index.json records it
    expect(codec.bytes_floor(16, plan) > 0, f"index codec {name!r}: bytes_floor must be positive")
    index = codec.new_index(16, plan)
    if rows := codec.training_rows(len(gallery), plan):
        index.train(gallery[rng.choice(len(gallery), rows, replace=False)])
    index.add_with_ids(gallery, np.arange(len(gallery), dtype=np.int64))
    queries = gallery[::10]
    sims, found = index.search(queries, 10)
    expect(np.shape(sims) == np.shape(found) == (len(queries), 10),
           f"index codec {name!r}: search must give {len(queries)}×10 similarities and labels")
    expect(bool(((found >= -1) & (found < len(gallery))).all()), f"index codec {name!r}: labels outside the rows")
    # Lossy codes may not find the item itself, but its cluster (20 well-separated clusters) they must.
    same = float((labels[np.maximum(found[:, 0], 0)] == labels[::10]).mean())
    expect(same >= 0.8, f"index codec {name!r}: only {same:.0%} of queries find an item of their cluster first")
    if codec.removable:
        index.remove_ids(np.arange(0, len(gallery), 10, dtype=np.int64))
        _, after = index.search(queries, 10)
        expect(not np.isin(after, np.arange(0, len(gallery), 10)).any(),
               f"index codec {name!r}: a removed row is still returned")
        sims, found = index.search(queries, 10)
    memory, disk = codec.sizes(index)
    expect(min(memory, disk) >= 0, f"index codec {name!r}: sizes must be byte counts, got {(memory, disk)}")
    with tempfile.TemporaryDirectory() as folder:
        written = codec.save(index, Path(folder))
        expect(written and all((Path(folder) / f).is_file() for f in written),
               f"index codec {name!r}: save must return the files it wrote, got {written!r}")
        again = codec.load(Path(folder), plan)
        sims2, found2 = again.search(queries, 10)
    expect(np.array_equal(found, found2) and np.allclose(sims, sims2, atol=1e-5),
           f"index codec {name!r}: the loaded index answers differently from the saved one")

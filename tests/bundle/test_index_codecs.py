"""Every index codec on synthetic galleries: build → save → load → search round trips, bytes per vector in memory
and on the written files, recall measured on held-out rows and equal to a brute-force count of the same queries,
the budget's choice, shards equal to a one-shot build, add/remove equal to the index filled with the final set, and
folders of older dmlplugs still read."""

from __future__ import annotations

import json
import re

import faiss
import numpy as np
import pytest

from dmlplug.bundle.codec_spec import budget_codecs
from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.index import MemoryGallery, build_from, build_index, holdout_rows
from dmlplug.bundle.index_budget import choose, parse_budget
from dmlplug.bundle.index_edit import add_items, edit_folder, remove_items
from dmlplug.bundle.index_files import read_index, save_index
from dmlplug.bundle.index_shards import shard_gallery
from tests.shared.shards import write_shards

#: Every built-in codec, binary with each of its rescoring sources.
CODECS = ("float32", "float16", "int8", "binary", "binary:rescore_from=int8", "binary:rescore_from=none", "pq",
          "ivf", "hnsw")


@pytest.fixture(autouse=True, scope="module")
def _one_faiss_thread():
    """faiss's k-means (PQ training) slows down tenfold when its two OpenMP threads share two busy cores with other
    test processes; one thread gives the same indexes."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)


def _clustered(n, dim, centers, seed, noise=0.6):
    middle = np.random.default_rng(0).standard_normal((centers, dim))
    rng = np.random.default_rng(seed)
    x = middle[rng.integers(0, centers, n)] + noise * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


GALLERY = _clustered(3000, 32, 60, seed=1)
PATHS = [f"img/{i:05d}.png" for i in range(len(GALLERY))]
QUERIES = _clustered(20, 32, 60, seed=2)


def _truth(gallery, queries, k, rows):
    """Exact top-k gallery rows (float64 sort) among ``rows``."""
    sims = queries.astype(np.float64) @ gallery[rows].astype(np.float64).T
    return rows[np.argsort(-sims, axis=1, kind="stable")[:, :k]]


def _saved(index, tmp_path, name="index"):
    folder = tmp_path / name
    folder.mkdir()
    save_index(index, folder, {"model_sha256": "m"})
    return folder


@pytest.mark.parametrize("spec", CODECS)
def test_every_codec_round_trips_and_records_what_its_files_take(spec, codec, codec_registry, tmp_path):
    index = build_index(GALLERY, PATHS, codec(spec))
    name = spec.partition(":")[0]
    folder = _saved(index, tmp_path)
    loaded = read_index(folder, codec_registry)
    assert loaded.codec == name and loaded.size == len(GALLERY)
    for k in (1, 10):
        assert [a.tolist() for a in loaded.search(QUERIES, k)] == [a.tolist() for a in index.search(QUERIES, k)]
    meta = json.loads((folder / "index.json").read_text())
    data = sum((folder / file).stat().st_size for file in meta["files"] if file != "paths.json")
    assert meta["codec"] == name and meta["disk_bytes_per_vector"] == round(data / len(GALLERY), 3)
    for where in ("memory", "disk"):  # the in-memory index's own measure agrees with the files
        key = f"{where}_bytes_per_vector"
        assert index.info[key] == pytest.approx(meta[key], rel=1e-3), key
    assert meta["recall_queries"] == 300 and {"recall@1", "recall@10"} <= set(meta)
    # the codecs that keep the float32 vectors give them back by label (dmlplug search --rerank needs them)
    assert loaded.keeps_floats == (spec in ("float32", "binary", "ivf", "hnsw"))
    if loaded.keeps_floats:
        np.testing.assert_array_equal(loaded.reconstruct(np.array([4, 2999])), GALLERY[[4, 2999]])
    # the neighbours are the gallery's: most of an exact top-10 (all of it for the exact codecs)
    found = loaded.search(QUERIES, 10)[1]
    share = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, _truth(GALLERY, QUERIES, 10,
                                                                              np.arange(len(GALLERY))), strict=True)])
    assert share >= {"pq": 0.5, "int8": 0.9, "binary": 0.9, "binary:rescore_from=int8": 0.9,
                     "binary:rescore_from=none": 0.2}.get(spec, 0.99)


@pytest.mark.parametrize("spec", ["float16", "int8", "binary", "binary:rescore_from=int8", "pq", "ivf"])
def test_recorded_recall_is_a_brute_force_count_on_the_held_out_rows(spec, codec):
    """The index as the held-out queries searched it (they removed again), searched for them: the overlap of its
    answer with a float64 brute force over the other rows is exactly what was recorded."""
    index = build_index(GALLERY, PATHS, codec(spec))
    held = holdout_rows(len(GALLERY))
    kept = np.setdiff1d(np.arange(len(GALLERY)), held)
    index.remove(held)
    for k in (1, 10):
        found = index.search(GALLERY[held], k)[1]
        truth = _truth(GALLERY, GALLERY[held], k, kept)
        count = np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth, strict=True)])
        assert index.info[f"recall@{k}"] == pytest.approx(count, abs=1e-12), k


def test_binary_codes_lose_recall_that_float32_keeps(codec):
    """Nearly uniform 32-d vectors: a sign code keeps little of the angle, so a short Hamming shortlist misses true
    neighbours that the exact index finds; a longer shortlist recovers some (the rescoring is exact)."""
    uniform = _clustered(3000, 32, 1, seed=3, noise=10.0)
    exact = build_index(uniform, PATHS, codec("float32")).info
    short = build_index(uniform, PATHS, codec("binary", rescore=1)).info
    long = build_index(uniform, PATHS, codec("binary", rescore=20)).info
    assert exact["recall@1"] == exact["recall@10"] == 1.0
    assert short["recall@1"] < 0.9 and short["recall@10"] < 0.9
    assert short["recall@10"] < long["recall@10"] < 1.0


def test_a_codec_whose_recall_was_not_measured_is_not_taken_for_a_perfect_one(codec_registry):
    # Nine vectors hold no query out: no lossy codec's recall is measured. It used to count as 1.0, so under a
    # budget everything fits, PQ (fewest bytes, "recall 1.0") beat the exact index.
    gallery = MemoryGallery(GALLERY[:9], PATHS[:9])
    codecs = budget_codecs(codec_registry)
    index, table = choose(gallery, parse_budget("1000B"), codecs)
    assert index.codec == "float32"
    lossy = [row for row in table if row.codec != "float32" and row.fits]
    assert lossy and all(row.recall10 is None and "recall not measured" in row.note for row in lossy)
    # Where float32 does not fit, the finest unmeasured codes that do win (not the coarsest).
    sizes = {row.codec: row.memory for row in table}
    limit = sizes["float32"] - 1
    index, table = choose(gallery, parse_budget(f"{limit:.0f}B"), codecs)
    fitting = {c: b for c, b in sizes.items() if c != "float32" and b <= limit}
    assert len(fitting) >= 2 and index.codec == max(fitting, key=fitting.get)


def test_the_budget_gives_pq_the_most_sub_quantisers_that_fit(codec):
    # The default pq_m (d/4 = 8: 6 B of codes) wastes a budget that holds finer codes: 30 B/vector fits pq_m = 16
    # (12 B of codes and the id), not 32 (24 B and the id), and it finds more true neighbours.
    gallery = MemoryGallery(GALLERY, PATHS)
    index, table = choose(gallery, parse_budget("30B"), [codec("pq")])
    default = build_from(gallery, codec("pq")).info
    assert index.codec == "pq" and index.info["pq_m"] == 16 and index.info["memory_bytes_per_vector"] <= 30
    assert index.info["recall@10"] > default["recall@10"] + 0.1
    assert table[0].note == "pq_m=16: the finest of 5 settings that fits"
    # However large the budget, PQ's codes stay at most half of int8's (pq_m <= d/2): finer, int8 does it cheaper.
    _, table = choose(gallery, parse_budget("1000B"), [codec("pq")])
    assert table[0].note.startswith("pq_m=16:")
    # pq_m given (--pq-m 8, or --codec pq:pq_m=8): the budget keeps it.
    index, table = choose(gallery, parse_budget("30B"), [codec("pq", pq_m=8)])
    assert index.info["pq_m"] == 8 and table[0].note == ""


def test_the_budget_bounds_memory_so_binary_codes_rescored_from_disk_compete(codec, codec_registry):
    """Binary codes keep 4 + 8 bytes a 32-d vector in memory, its float32 vectors on disk: under 30 B they beat
    PQ's finest codes (recall@10 0.96 against 0.80), their 140 B on disk shown but not counted."""
    index, table = choose(MemoryGallery(GALLERY, PATHS), parse_budget("30B"), budget_codecs(codec_registry))
    rows = {row.codec: row for row in table}
    assert index.codec == "binary" and rows["binary"].fits and rows["pq"].fits
    assert rows["binary"].memory < 16 < 4 * 32 < rows["binary"].disk
    assert rows["binary"].recall10 > 0.9 > rows["pq"].recall10


def test_pq_parameters_follow_the_gallery_and_can_be_set(codec):
    index = build_index(GALLERY, PATHS, codec("pq"))
    n = len(GALLERY) - 300
    assert index.info["nlist"] == min(round(n ** 0.5), n // 39) and index.info["pq_m"] == 8
    assert index.info["pq_nbits"] == 6  # 2700 training vectors: 64 centroids of 39+ points, not 256
    small = build_index(GALLERY, PATHS, codec("pq:pq_m=4,nlist=4", pq_nbits=4)).info
    assert (small["pq_m"], small["nlist"], small["pq_nbits"]) == (4, 4, 4)
    assert small["memory_bytes_per_vector"] < index.info["memory_bytes_per_vector"]
    with pytest.raises(BundleError, match="pq_m 5 does not divide the embedding size 32"):
        build_index(GALLERY, PATHS, codec("pq", pq_m=5))
    with pytest.raises(BundleError, match="--nlist does not apply to the int8 codec") as caught:
        codec("int8", nlist=4)
    assert "(ivf, pq)" in caught.value.fix
    for spec, fields, phrase in (("pq:pq_m=4", {"pq_m": 4}, "--pq-m and --codec pq:pq_m=4 both set pq_m"),
                                 ("pq:pq_m=0", {}, "pq_m: Input should be greater than or equal to 1"),
                                 ("pq:q_m=4", {}, "q_m"), ("lz4", {}, "unknown index_codec 'lz4'"),
                                 ("pq:pq_m", {}, "'pq_m' is not key=value")):
        with pytest.raises(BundleError, match=re.escape(phrase)) as caught:
            codec(spec, **fields)
        assert "dmlplug list index_codecs --params" in caught.value.fix or phrase.startswith("--pq-m"), spec


def test_the_budget_picks_the_most_accurate_codec_that_fits(codec, codec_registry):
    gallery = MemoryGallery(GALLERY, PATHS)
    candidates = ("float32", "float16", "int8", "binary", "pq")
    measured = {c: build_from(gallery, codec(c)).info for c in candidates}
    memory = {c: info["memory_bytes_per_vector"] for c, info in measured.items()}
    assert sorted(memory, key=memory.get) == ["binary", "pq", "int8", "float16", "float32"]
    assert measured["int8"]["recall@10"] > measured["binary"]["recall@10"] > measured["pq"]["recall@10"]
    # between int8 and float16: int8; just under int8: binary; a total that leaves float32 room: float32
    for text, chosen in ((f"{memory['int8'] + 1:.0f}B", "int8"), (f"{memory['int8'] - 1:.0f}B", "binary"),
                         (f"{(memory['float32'] + 1) * len(GALLERY) / 1000:.0f}KB", "float32")):
        index, table = choose(gallery, parse_budget(text), budget_codecs(codec_registry))
        assert index.codec == chosen, text
        fits = {row.codec: row.fits for row in table}
        limit = parse_budget(text).per_vector_for(len(GALLERY))
        assert fits == {c: memory[c] <= limit for c in candidates}
    with pytest.raises(BundleError, match="no index codec fits the budget 4B") as caught:
        choose(gallery, parse_budget("4B"), budget_codecs(codec_registry))
    assert "pq" in str(caught.value)
    assert "not built: each vector takes at least 8.75 B (code and id)" in str(caught.value)
    assert parse_budget("2GB").total == 2e9 and parse_budget("1.5KiB").total == 1536
    with pytest.raises(BundleError, match="is not a size"):
        parse_budget("64 bits")


@pytest.mark.parametrize("spec", ["float32", "float16", "int8", "pq", "binary:rescore_from=int8"])
def test_shards_build_the_index_a_one_shot_build_gives(spec, codec, tmp_path):
    shards = shard_gallery(write_shards(tmp_path / "s", GALLERY, PATHS, [0, 1000, 1700, 3000]))
    assert shards.size == 3000 and len(list(shards.chunks())) == 3
    one, sharded = build_index(GALLERY, PATHS, codec(spec)), build_from(shards, codec(spec))
    assert sharded.paths == one.paths and sharded.info == one.info
    for k in (1, 10):
        assert [a.tolist() for a in sharded.search(QUERIES, k)] == [a.tolist() for a in one.search(QUERIES, k)]


def test_bad_shards_are_one_clear_error_before_any_build(tmp_path):
    # The manifest checks themselves are tests/bundle/test_shards.py's; here: the index's gallery goes through them.
    base = write_shards(tmp_path / "ok", GALLERY, PATHS, [0, 1500, 3000])
    manifest = json.loads((base / "manifest.json").read_text())
    mixed = {**manifest, "shards": [{**manifest["shards"][0], "model_sha256": "x" * 64}, manifest["shards"][1]]}
    (base / "manifest.json").write_text(json.dumps(mixed))
    with pytest.raises(BundleError, match="shards of different models cannot be mixed"):
        shard_gallery(base)
    (base / "manifest.json").write_text(json.dumps(manifest))
    other = write_shards(tmp_path / "other", _clustered(100, 16, 3, seed=5), PATHS[:100], [0, 100])
    (base / "shard-00001-of-00002.npz").write_bytes((other / "shard-00000-of-00001.npz").read_bytes())
    with pytest.raises(BundleError, match="not the file the manifest records"):
        shard_gallery(base / "manifest.json")


@pytest.mark.parametrize("spec", ["float32", "float16", "int8", "binary", "binary:rescore_from=int8",
                                  "binary:rescore_from=none", "pq", "ivf"])
def test_add_and_remove_equal_the_index_filled_with_the_final_items(spec, codec, codec_registry, tmp_path):
    """Start from 2000 rows, add 1000, remove 300 of the first ones: the edited index answers as the same trained
    index filled with the 2700 final rows (for the untrained codecs: as a rebuild)."""
    picked = codec(spec)
    index = build_index(GALLERY[:2000], PATHS[:2000], picked)
    folder = _saved(index, tmp_path)
    gone = [PATHS[i] for i in range(0, 600, 2)]
    edit_folder(folder, codec_registry, add=(GALLERY[2000:], PATHS[2000:]))
    edited = edit_folder(folder, codec_registry, remove=gone)
    assert edited.size == 2700 and json.loads((folder / "index.json").read_text())["size"] == 2700
    assert not list(tmp_path.glob(".index.*"))  # the swapped folders are gone
    final = [i for i in range(3000) if PATHS[i] not in set(gone)]
    labels = np.array(final, dtype=np.int64)
    if spec == "float32":
        reference = build_index(GALLERY[final], [PATHS[i] for i in final], picked)
    else:  # the trained quantiser, emptied and filled with the final rows under their labels
        if spec.startswith("binary"):
            trained = picked.component.new_index(32, edited.info)
            if trained.source is not None and not trained.source.trained:  # int8: the edited index's ranges
                trained.source.ranges = edited.index.source.ranges
        else:
            trained = faiss.clone_index(index.index)
            trained.reset()
            picked.component.configure(faiss, trained, edited.info)
        trained.add_with_ids(GALLERY[final], labels)
        reference = type(edited)(trained, picked, PATHS, {})
    for k in (1, 10):
        sims, rows = edited.search(QUERIES, k)
        ref_sims, ref_rows = reference.search(QUERIES, k)
        if not spec.endswith("none"):  # Hamming distances alone tie often, and ties come in insertion order
            assert [[edited.paths[r] for r in row] for row in rows] == [[reference.paths[r] for r in row]
                                                                        for row in ref_rows]
        np.testing.assert_allclose(sims, ref_sims, rtol=0, atol=1e-6)
    if edited.keeps_floats:  # by label: every item's vector
        live = np.array([label for label, path in enumerate(edited.paths) if path is not None])
        np.testing.assert_array_equal(edited.reconstruct(live), GALLERY[[PATHS.index(edited.paths[i]) for i in live]])
    if spec == "binary":  # removed items' vectors are gone from the file too
        on_disk = np.load(folder / "vectors.npy")
        assert not on_disk[[PATHS.index(p) for p in gone]].any() and on_disk.shape == (3000, 32)


def test_edits_refuse_what_they_cannot_do(codec):
    index = build_index(GALLERY[:500], PATHS[:500], codec("hnsw"))
    with pytest.raises(BundleError, match="is a hnsw index, which cannot remove items"):
        remove_items(index, PATHS[:2])
    index = build_index(GALLERY[:500], PATHS[:500], codec("int8"))
    with pytest.raises(BundleError, match="1 of the items to remove are not in"):
        remove_items(index, [PATHS[0], "nowhere.png"])
    with pytest.raises(BundleError, match="already in the index or given twice, e.g. img/00003.png"):
        add_items(index, GALLERY[3:5], PATHS[3:5])
    with pytest.raises(BundleError, match="an index of 32-d vectors"):
        add_items(index, np.zeros((2, 16), np.float32), ["a", "b"])
    assert index.size == 500


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_an_index_written_before_the_codecs_still_loads(kind, codec_registry, tmp_path):
    """index.json without `codec`, an unlabelled faiss index (rows were labels): read with its kind's codec."""
    vectors, paths = GALLERY[:500], PATHS[:500]
    if kind == "ivf":
        old = faiss.IndexIVFFlat(faiss.IndexFlatIP(32), 32, 8, faiss.METRIC_INNER_PRODUCT)
        old.train(vectors)
        params = {"nlist": 8, "nprobe": 8}
    else:
        old = faiss.IndexHNSWFlat(32, 32, faiss.METRIC_INNER_PRODUCT)
        params = {"M": 32, "efSearch": 77}
    old.add(vectors)
    folder = tmp_path / "old"
    folder.mkdir()
    faiss.write_index(old, str(folder / "index.faiss"))
    (folder / "paths.json").write_text(json.dumps(paths))
    (folder / "index.json").write_text(json.dumps({"kind": kind, "storage": "faiss", "size": 500, "dim": 32,
                                                   **params}))
    loaded = read_index(folder, codec_registry)
    assert loaded.codec == kind
    if kind == "hnsw":
        assert loaded.index.hnsw.efSearch == 77
    found = loaded.search(QUERIES, 5)[1]
    assert (found == _truth(GALLERY, QUERIES, 5, np.arange(500))).mean() > 0.95  # all lists probed / a good graph


@pytest.mark.parametrize("kind", ["float16", "int8"])
def test_a_scalar_quantised_index_labelled_by_idmap2_still_loads_and_edits(kind, codec, codec_registry, tmp_path):
    """Until the codecs were plugins float16 and int8 were IDMap2 (a label map never read, ~44 B a vector)."""
    old = faiss.index_factory(32, "IDMap2,SQfp16" if kind == "float16" else "IDMap2,SQ8", faiss.METRIC_INNER_PRODUCT)
    old.train(GALLERY)
    old.add_with_ids(GALLERY[:500], np.arange(500, dtype=np.int64))
    folder = tmp_path / "old"
    folder.mkdir()
    faiss.write_index(old, str(folder / "index.faiss"))
    (folder / "paths.json").write_text(json.dumps(PATHS[:500]))
    (folder / "index.json").write_text(json.dumps({"kind": kind, "codec": kind, "storage": "faiss", "size": 500,
                                                   "dim": 32}))
    assert read_index(folder, codec_registry).search(QUERIES, 3)[1].tolist() == old.search(QUERIES, 3)[1].tolist()
    assert edit_folder(folder, codec_registry, remove=PATHS[:5]).size == 495
    assert isinstance(faiss.read_index(str(folder / "index.faiss")), faiss.IndexIDMap2)  # edited, it stays one


def test_a_binary_index_of_the_first_codecs_still_loads_searches_and_edits(codec, codec_registry, tmp_path):
    """Its layout then: labelled codes (IndexBinaryIDMap2) in index.faiss, every float32 vector in rescore.faiss,
    index.json with `rescore` and `bytes_per_vector` but no `rescore_from`."""
    vectors, paths = GALLERY[:500], PATHS[:500]
    labels = np.arange(500, dtype=np.int64)
    codes = faiss.IndexBinaryIDMap2(faiss.IndexBinaryFlat(32))
    codes.add_with_ids(np.packbits(vectors > 0, axis=1), labels)
    floats = faiss.IndexIDMap2(faiss.IndexFlatIP(32))
    floats.add_with_ids(vectors, labels)
    folder = tmp_path / "old"
    folder.mkdir()
    faiss.write_index_binary(codes, str(folder / "index.faiss"))
    faiss.write_index(floats, str(folder / "rescore.faiss"))
    (folder / "paths.json").write_text(json.dumps(paths))
    (folder / "index.json").write_text(json.dumps({"kind": "binary", "codec": "binary", "storage": "faiss",
                                                   "size": 500, "dim": 32, "rescore": 10, "bytes_per_vector": 552.0}))
    loaded = read_index(folder, codec_registry)
    assert loaded.keeps_floats and (loaded.search(QUERIES, 5)[1] == _truth(vectors, QUERIES, 5, labels)).mean() > 0.9
    np.testing.assert_array_equal(loaded.reconstruct(labels[:3]), vectors[:3])
    edit_folder(folder, codec_registry, remove=paths[:10])
    meta = json.loads((folder / "index.json").read_text())
    assert meta["size"] == 490 and "bytes_per_vector" not in meta and meta["memory_bytes_per_vector"] > 4 * 32
    assert not np.isin(read_index(folder, codec_registry).search(QUERIES, 20)[1], labels[:10]).any()


def test_binary_codes_keep_their_bits_in_memory_and_the_vectors_on_disk(codec, codec_registry, tmp_path):
    """binary: 4 B of sign bits and an 8-byte label a 32-d vector in memory, the float32 vectors memory-mapped from
    vectors.npy; with int8 rescoring 32 B of codes more in memory and nothing else on disk; with none, the bits."""
    sizes = {}
    for source in ("disk", "int8", "none"):
        index = build_index(GALLERY, PATHS, codec(f"binary:rescore_from={source}"))
        loaded = read_index(_saved(index, tmp_path, source), codec_registry)
        sizes[source] = (index.info["memory_bytes_per_vector"], index.info["disk_bytes_per_vector"])
        assert loaded.keeps_floats == (source == "disk") and loaded.info["rescore_from"] == source
    assert 12 <= sizes["disk"][0] < 12.1 and 4 * 32 + 12 <= sizes["disk"][1] < 4 * 32 + 12.2
    assert 12 + 32 <= sizes["int8"][0] < sizes["int8"][1] < 12 + 32 + 0.5
    assert sizes["none"] == (sizes["disk"][0], sizes["disk"][0])
    loaded = read_index(tmp_path / "disk", codec_registry)
    assert isinstance(loaded.index.source.rows.array, np.memmap)
    np.testing.assert_array_equal(loaded.reconstruct(np.array([5, 7])), GALLERY[[5, 7]])


def test_an_exact_index_reads_without_a_registry_a_coded_one_asks_for_it(codec, codec_registry, tmp_path):
    assert read_index(_saved(build_index(GALLERY, PATHS, codec("float32")), tmp_path, "exact")).size == 3000
    folder = _saved(build_index(GALLERY, PATHS, codec("int8")), tmp_path, "int8")
    with pytest.raises(BundleError, match="is a int8 index, and reading one needs the registry of index codecs"):
        read_index(folder)
    meta = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps({**meta, "codec": "sq4", "kind": "sq4"}))
    with pytest.raises(BundleError, match="built by the index codec 'sq4', which is not registered") as caught:
        read_index(folder, codec_registry)
    assert "install or enable the plugin" in caught.value.fix

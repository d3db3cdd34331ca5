"""Sharded embedding (#29 item 3): ``torchrun --nproc-per-node 2 -m dmlplug embed ... --out DIR``.

The real thing: two processes started by torchrun meet in a gloo group on 127.0.0.1, each embeds its block of
the sorted image folder with the exported bundle, rank 0 writes the manifest. The shards read back in manifest
order must equal the single-process ``dmlplug embed`` output bit for bit, and a damaged or mixed manifest must
be refused by :func:`read_shards` with a clear error (exit code 2).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.index_files import read_index
from dmlplug.bundle.shards import SHARD_MANIFEST, file_sha256, open_shards, read_shards, shard_name, shard_range

ROOT = Path(__file__).resolve().parents[2]
#: 24 images in batches of 5: 5 batches, rank 0 gets 2 (10 images), rank 1 gets 3 (14 images, the last one short).
BATCH = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    # One thread per process, as torchrun itself sets for its workers. PyTorch's CPU kernels (the TorchScript
    # bundle) change the last bits of a result with the number of intra-op threads, so the single-process
    # reference runs with the same fixed thread count; batches are the same by construction (shard_range).
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _embed_one_process(*args):
    return subprocess.run([sys.executable, "-m", "dmlplug", "embed", *map(str, args)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env=_env())


def _torchrun_embed(*args, nproc=2):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), "-m", "dmlplug",
                           "embed", *map(str, args)], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=_env())


def _concat(folder):
    parts = list(read_shards(folder))
    return np.concatenate([p.embeddings for p in parts]), [path for p in parts for path in p.paths]


@pytest.fixture(scope="module", params=["onnx", "torchscript"])
def sharded(request, tmp_path_factory, image_folder):
    """Both bundles' images embedded by one process (.npz) and by two torchrun ranks (a shard folder)."""
    bundle = request.getfixturevalue(f"{request.param}_bundle")
    folder = tmp_path_factory.mktemp(f"shards_{request.param}")
    single = folder / "single.npz"
    proc = _embed_one_process(bundle, image_folder, "--out", single, "--batch-size", BATCH, "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = folder / "shards"
    proc = _torchrun_embed(bundle, image_folder, "--out", out, "--batch-size", BATCH, "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "24 embeddings" in proc.stdout and "in 2 shards" in proc.stdout
    return bundle, single, out


def test_two_torchrun_ranks_equal_one_process_bit_for_bit(sharded, image_folder, tmp_path, cli):
    from dmlplug.bundle.bundle import load_bundle

    bundle_dir, single, out = sharded
    embeddings, paths = _concat(out)
    with np.load(single) as reference:
        # Bit for bit: compare the raw float32 words, not values within a tolerance.
        assert embeddings.dtype == reference["embeddings"].dtype == np.float32
        assert np.array_equal(embeddings.view(np.uint32), reference["embeddings"].view(np.uint32))
        assert paths == [str(p) for p in reference["paths"]]
    manifest = json.loads((out / SHARD_MANIFEST).read_text())
    bundle = load_bundle(bundle_dir)
    assert [s["file"] for s in manifest["shards"]] == [shard_name(0, 2), shard_name(1, 2)]
    assert [s["rows"] for s in manifest["shards"]] == [10, 14]
    assert [s["first_image"] for s in manifest["shards"]] == [0, 10]
    assert manifest["total"] == 24 and manifest["world_size"] == 2 and manifest["batch_size"] == BATCH
    assert manifest["model_sha256"] == bundle.model_sha256 == manifest["bundle"]["model_sha256"]
    assert manifest["embedding_size"] == bundle.embedding_size
    assert manifest["bundle"]["checkpoint_sha256"] == bundle.manifest["source"]["checkpoint_sha256"]
    assert sorted(p.name for p in out.iterdir()) == [SHARD_MANIFEST, shard_name(0, 2), shard_name(1, 2)]
    shards = open_shards(out)
    shards.check_bundle(bundle.model_sha256, bundle.embedding_size)
    with pytest.raises(BundleError, match="not by this bundle"):
        shards.check_bundle("0" * 64, bundle.embedding_size)
    # What torchrun wrote is what `dmlplug index --from-shards` reads: the same index as from the images.
    code, _, err = cli("index", bundle_dir, "--from-shards", out, "--out", tmp_path / "from-shards", "-q")
    assert code == 0, err
    code, _, err = cli("index", bundle_dir, image_folder, "--out", tmp_path / "from-images", "-q")
    assert code == 0, err
    assert read_index(tmp_path / "from-shards").paths == read_index(tmp_path / "from-images").paths


def test_shards_flag_in_one_process_writes_one_shard(onnx_bundle, image_folder, tmp_path, cli):
    code, out, err = cli("embed", onnx_bundle, image_folder, "--out", tmp_path / "one", "--shards",
                         "--batch-size", BATCH, "--quiet")
    assert code == 0, err
    single = tmp_path / "single.npz"
    assert cli("embed", onnx_bundle, image_folder, "--out", single, "--batch-size", 7, "--quiet")[0] == 0
    embeddings, paths = _concat(tmp_path / "one")
    with np.load(single) as reference:
        # Another batch size in the reference: ONNX Runtime gives the same bits whatever the batch composition.
        assert np.array_equal(embeddings.view(np.uint32), reference["embeddings"].view(np.uint32))
        assert paths == [str(p) for p in reference["paths"]]
    assert [s["file"] for s in open_shards(tmp_path / "one").manifest["shards"]] == [shard_name(0, 1)]


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_shard_ranges_cover_the_list_in_whole_batches(world):
    for n in range(0, 40):
        for batch in (1, 3, 5, 64):
            ranges = [shard_range(n, batch, rank, world) for rank in range(world)]
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            for (a, b), (c, _) in zip(ranges, ranges[1:], strict=False):
                assert b == c and a <= b  # contiguous, disjoint, in rank order
            batches = [-(-(b - a) // batch) for a, b in ranges]
            assert max(batches) - min(batches) <= 1  # balanced to one batch
            assert all(a % batch == 0 for a, _ in ranges)  # every shard starts on a batch boundary


def test_run_directory_and_used_folder_are_refused_before_writing(run_dir, image_folder, onnx_bundle, tmp_path, cli):
    code, _, err = cli("embed", run_dir, image_folder, "--out", tmp_path / "a", "--shards", "--quiet")
    assert code == 2 and "needs a bundle" in err and "Traceback" not in err
    assert not (tmp_path / "a").exists()
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("x")
    code, _, err = cli("embed", onnx_bundle, image_folder, "--out", used, "--shards", "--quiet")
    assert code == 2 and "not an empty folder" in err
    assert sorted(p.name for p in used.iterdir()) == ["keep.txt"]


def test_a_rank_that_fails_leaves_no_shard_and_no_manifest(onnx_bundle, broken_folder, tmp_path):
    # 4 files in batches of 1: rank 1 gets the last two, one of which is not an image; --strict fails it.
    out = tmp_path / "out"
    proc = _torchrun_embed(onnx_bundle, broken_folder, "--out", out, "--batch-size", 1, "--strict", "--quiet")
    assert proc.returncode != 0
    assert "cannot read image" in proc.stderr and "rank 1 failed" in proc.stderr
    assert not out.exists()


# ------------------------------------------------------------------------------------------ bad manifests
@pytest.fixture
def copy(sharded, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(sharded[2], folder)
    return folder


def _edit(folder, change):
    manifest = json.loads((folder / SHARD_MANIFEST).read_text())
    change(manifest)
    (folder / SHARD_MANIFEST).write_text(json.dumps(manifest))


def _refused(folder, match):
    with pytest.raises(BundleError, match=match) as caught:
        next(read_shards(folder))
    assert caught.value.exit_code == 2
    return caught.value


def test_missing_manifest_and_missing_shard(copy):
    (copy / shard_name(1, 2)).unlink()
    _refused(copy, "shard-00001-of-00002.npz listed in the manifest is missing")
    (copy / SHARD_MANIFEST).unlink()
    _refused(copy, "not a sharded embedding: it has no manifest.json")


def test_shards_of_another_model_or_size_are_refused(copy):
    _edit(copy, lambda m: m["shards"][1].update(model_sha256="f" * 64))
    _refused(copy, "shard-00001-of-00002.npz was embedded by another model")
    _edit(copy, lambda m: m["shards"][1].update(model_sha256=m["model_sha256"], embedding_size=7))
    _refused(copy, "another model .*7-d")


def test_a_changed_shard_or_counts_are_refused(copy):
    _edit(copy, lambda m: m.update(total=m["total"] + 1))
    _refused(copy, "damaged: `total` is 25 but its shards hold 24 rows")
    _edit(copy, lambda m: m.update(total=m["total"] - 1))
    # A shard replaced by one of another width, its size and sha256 updated to match: the arrays are checked.
    file = copy / shard_name(0, 2)
    with np.load(file) as data:
        narrow, paths = data["embeddings"][:, :-1], data["paths"]
    np.savez(file, embeddings=narrow, paths=paths)
    _refused(copy, "sha256 differs")
    _edit(copy, lambda m: m["shards"][0].update(size=file.stat().st_size, sha256=file_sha256(file)))
    shards = read_shards(copy)
    with pytest.raises(BundleError, match="shape"):
        next(shards)


def test_a_manifest_of_another_layout_is_refused(copy):
    _edit(copy, lambda m: m.update(format_version=99))
    _refused(copy, "layout version 99")
    _edit(copy, lambda m: m.update(format="something-else", format_version=1))
    _refused(copy, "not a manifest of sharded embeddings")

"""The fourth example distribution, ``examples/dmlplug-example-retrieval``: a re-ranker, an index codec and a tune
pruner added from outside, installed with pip and used exactly as built-ins are: its own tests, ``dmlplug index
--codec``, ``--budget``, ``dmlplug search --rerank``, ``[evaluation] rerank`` and a ``[tune]`` space file."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dmlplug
from tests.shared.e2e import ROOT, run_cli

EXAMPLE = ROOT / "examples" / "dmlplug-example-retrieval"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The distribution installed into a private folder (for PYTHONPATH)."""
    target = tmp_path_factory.mktemp("retrieval") / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(EXAMPLE)], check=True, capture_output=True, text=True)
    return target


@pytest.fixture
def with_example(site, monkeypatch):
    """The process's plugin host, found the installed distribution through its entry point (the CLI's too)."""
    from dmlplug import plugins

    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    host = plugins.PluginHost().load()
    assert host.records["example_retrieval"].error is None
    monkeypatch.setattr(plugins, "_HOST", host)
    monkeypatch.setattr(plugins, "get_host", lambda **_: host)
    return host


def test_its_own_tests_pass_installed(site):
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=EXAMPLE,
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "4 passed" in proc.stdout


def test_listed_and_its_space_file_validates_like_a_builtins(site):
    env = {"PYTHONPATH": str(site)}
    listed = run_cli("list", "rerankers", env=env)
    assert listed.returncode == 0 and "example_mutual" in listed.stdout and "(example_retrieval)" in listed.stdout
    space = run_cli("validate", EXAMPLE / "hyperband.space.toml", env=env)
    assert space.returncode == 0, space.stderr
    assert "search space of 2 parameters" in space.stdout
    without = run_cli("validate", EXAMPLE / "hyperband.space.toml")  # not installed: the name is unknown
    assert without.returncode == 2 and "unknown tune_pruner 'example_hyperband'" in without.stderr


def test_index_codec_and_reranker_through_the_command_line(with_example, onnx_bundle, image_folder, tmp_path,
                                                             cli):
    coded, exact = tmp_path / "sq4", tmp_path / "exact"
    code, out, err = cli("index", onnx_bundle, image_folder, "--out", coded, "--codec", "example_sq4", "-q")
    assert code == 0, err
    meta = json.loads((coded / "index.json").read_text())
    dim = meta["dim"]
    assert meta["codec"] == "example_sq4" and meta["memory_bytes_per_vector"] >= dim / 2 + 8
    assert meta["memory_bytes_per_vector"] < 4 * dim  # far below float32's
    query = sorted(image_folder.rglob("*.png"))[0]
    code, out, err = cli("search", onnx_bundle, coded, query, "--k", "3", "--json")
    assert code == 0, err
    assert json.loads(out)[0]["matches"][0]["path"].endswith(query.name)  # the image itself, through 4-bit codes
    # Re-ranking needs float vectors, which 4-bit codes are not: refused, as for a built-in lossy codec.
    code, _, err = cli("search", onnx_bundle, coded, query, "--rerank", "example_mutual")
    assert code == 2 and "keeps only compressed codes" in err
    assert cli("index", onnx_bundle, image_folder, "--out", exact, "-q")[0] == 0
    code, out, err = cli("search", onnx_bundle, exact, query, "--k", "3", "--json", "--rerank", "example_mutual:n=2")
    assert code == 0, err
    assert json.loads(out)[0]["matches"][0]["path"].endswith(query.name)  # itself: always mutual
    code, _, err = cli("search", onnx_bundle, exact, query, "--rerank", "example_mutual:m=2")
    assert code == 2 and "--rerank.m: unknown key" in err
    code, out, err = cli("index", onnx_bundle, image_folder, "--out", tmp_path / "budget", "--budget", "100KB")
    assert code == 0, err
    assert "example_sq4" in out + err  # a candidate of --budget, measured like the built-ins


class LeaveOneOut:
    """The problem by hand: exact cosine search of every item among the others."""

    def __init__(self, x):
        self.queries = self.gallery = x
        self.depth, self.budget_bytes = None, 1 << 20

    def search(self, queries, k, depth=None):
        sims = queries @ self.gallery.T
        np.fill_diagonal(sims, -np.inf)
        return np.argsort(-sims, axis=1, kind="stable")[:, :k]

    def gallery_neighbours(self, n):
        return self.search(self.gallery, n)


def test_reranker_in_an_evaluation_is_the_one_computed_by_hand(with_example):
    from dmlplug_example_retrieval.mutual import MutualFirst

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(8), 6)
    x = rng.normal(size=(48, 16)) + 1.0 * rng.normal(size=(8, 16))[labels]
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    metrics = dmlplug.evaluate(x, labels, ["recall"], rerank=[{"name": "example_mutual", "n": 3, "shortlist": 5}])
    first = MutualFirst(3, 5).rerank(LeaveOneOut(x), 1)[:, 0]
    assert metrics["recall@1+example_mutual"] == pytest.approx(float((labels[first] == labels).mean()))
    plain = LeaveOneOut(x).search(x, 1)[:, 0]
    assert metrics["recall@1"] == pytest.approx(float((labels[plain] == labels).mean()))
    assert (first != plain).any()  # the re-ranker changed something, so the two metrics test different lists

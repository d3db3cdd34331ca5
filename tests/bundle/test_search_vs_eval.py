"""`dmlplug search` returns the neighbours the run's own evaluation ranks (EvalContext.knn, the graph behind
recall@k), on the trained quickstart run of docs/deploy.md: the whole test split indexed and searched."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow

#: Neighbours compared per query (the quickstart evaluates recall up to @8).
K = 10


def test_search_returns_the_evaluation_knn_up_to_exact_ties(trained_run, trained_evaluation, tmp_path, cli):
    import dmlplug
    from dmlplug.evaluation import EvalContext

    _, bundle_dir = trained_run
    embeddings, labels, loaded = trained_evaluation
    reference = embeddings.astype(np.float64)
    test = loaded.dataset.test
    folder = tmp_path / "test_split"
    folder.mkdir()
    paths = [str(folder / f"{i:04d}.png") for i in range(len(test))]  # sorted path order = split order
    for i, path in enumerate(paths):
        test.load_image(i).save(path)  # PNG: lossless, the bundle sees the split's own pixels
    code, _, err = cli("index", bundle_dir, folder, "--out", tmp_path / "index", "-q")
    assert code == 0, err
    # Every test image is a query; it is in the index too, so ask for one more match and drop itself.
    code, out, err = cli("search", bundle_dir, tmp_path / "index", *paths, "--k", K + 1, "--json")
    assert code == 0, err
    results = json.loads(out)
    assert [r["query"] for r in results] == paths

    # The bundle's vectors are the evaluation's within the export tolerance; a similarity then moves by at most
    # |Δq| + |Δg| <= 2·√D·max|Δ|, so two neighbours closer than that may swap (and float32 rounding, 1e-6).
    bundle = dmlplug.load_bundle(bundle_dir)
    vectors = bundle.embed([test.load_image(i) for i in range(len(test))])
    max_diff = float(np.abs(vectors - reference).max())
    assert max_diff <= json.loads((bundle_dir / "bundle.json").read_text())["verification"]["tolerance"]
    slack = 2 * np.sqrt(reference.shape[1]) * max_diff + 1e-6

    ctx = EvalContext(embeddings, labels, seed=loaded.recipe.run.seed)
    knn = ctx.knn(K)
    assert len(ctx.knn_queries) == len(test)  # every query has class mates: every row is compared
    for row, query in enumerate(ctx.knn_queries):
        found = [paths.index(m["path"]) for m in results[query]["matches"]]
        assert query in found, f"query {query} does not find itself"
        assert reference[found[0]] @ reference[query] >= 1 - slack  # the self-match (or an identical image) leads
        found.remove(query)
        expected = knn[row, :K].tolist()
        similarity = reference[query] @ reference.T  # float64 cosine similarity of the evaluation embeddings
        for got, want in zip(found[:K], expected, strict=True):
            if got != want:
                assert abs(similarity[got] - similarity[want]) <= slack, (
                    f"query {query}: search ranks {got} (similarity {similarity[got]:.8f}) where the evaluation "
                    f"ranks {want} ({similarity[want]:.8f})")

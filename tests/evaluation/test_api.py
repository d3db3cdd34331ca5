import json
import subprocess
import sys

import numpy as np
import pytest
from eval_helpers import clustered
from typer.testing import CliRunner

import dmlplug
from dmlplug.errors import ComponentError, DataError, DmlplugError, RecipeError
from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.api import evaluate, load_npz, parse_set_options

EVALUATOR_NAMES = ["retrieval", "recall", "map_at_r", "r_precision", "map_at_1000", "map_at_c", "nmi", "ami",
                   "f1", "verification", "opis", "eps_opis", "structure"]


@pytest.fixture(scope="module")
def data():
    return clustered(12, (3, 8), 8, 0.8, seed=0)


def test_default_evaluation_keys(data):
    x, y = data
    m = dmlplug.evaluate(x, y)
    assert list(m) == ["recall@1", "recall@2", "recall@4", "recall@8", "map@r", "r_precision",
                       "excluded_queries"]


def test_every_registered_evaluator_builds_from_defaults_and_gives_finite_floats(data):
    x, y = data
    m = evaluate(x, y, EVALUATOR_NAMES[1:])
    assert {"recall@1", "map@r", "r_precision", "map@1000", "map@1000_revisiting", "map@c",
            "map@c_revisiting", "nmi", "ami", "f1", "tar@far=0.001", "eer", "opis", "eps_opis", "rho@1",
            "rho@2", "pi_intra", "pi_inter", "pi_ratio", "uniformity_g2", "class_concentration_var",
            "excluded_queries"} <= set(m)
    assert all(isinstance(v, float) and np.isfinite(v) for v in m.values())
    for name in EVALUATOR_NAMES:
        evaluator = dmlplug.create("evaluator", name)
        assert callable(evaluator.evaluate)


def test_dict_specs_and_params(data):
    x, y = data
    m = evaluate(x, y, [{"name": "recall", "k": [3, 1]}, {"name": "map_at_1000", "k": 10,
                                                           "normalizations": ["revisiting"]}])
    assert list(m) == ["recall@1", "recall@3", "map@10_revisiting", "excluded_queries"]


def test_bad_specs_are_user_errors(data):
    x, y = data
    with pytest.raises(ComponentError, match="did you mean"):
        evaluate(x, y, ["recal"])
    with pytest.raises(RecipeError, match="unknown key"):
        evaluate(x, y, [{"name": "recall", "kk": [1]}])
    with pytest.raises(ComponentError):
        evaluate(x, y, [42])
    with pytest.raises(ComponentError, match="two evaluators"):
        evaluate(x, y, ["recall", "retrieval"])


def test_bad_inputs_are_user_errors(data):
    x, y = data
    with pytest.raises(DataError, match="one label per embedding"):
        EvalContext(x, y[:-1])
    with pytest.raises(DataError, match="2-D"):
        EvalContext(x[0], y[:1])
    with pytest.raises(DataError, match="together"):
        EvalContext(x, y, query_mask=np.ones(len(y), bool))
    with pytest.raises(DataError, match="boolean"):
        EvalContext(x, y, query_mask=np.ones(len(y)), gallery_mask=np.ones(len(y)))
    with pytest.raises(DataError, match="integers"):
        EvalContext(x, y + 0.5)


def test_torch_tensors_are_accepted(data):
    import torch

    x, y = data
    a = evaluate(torch.from_numpy(x), torch.from_numpy(y), backend="torch")
    b = evaluate(x, y, backend="faiss-cpu")
    assert a == b


def test_artifacts_dir(tmp_path, data):
    x, y = data
    evaluate(x, y, ["opis", "verification", {"name": "recall", "per_class": True}], artifacts_dir=tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= {"opis.png", "opis_per_class.csv", "opis_curves.json",
                                                   "roc.csv", "roc.png", "recall_per_class.csv"}


def test_load_npz_errors(tmp_path, data):
    x, y = data
    with pytest.raises(DataError, match="does not exist") as info:
        load_npz(tmp_path / "missing.npz")
    assert info.value.fix and info.value.where
    np.savez(tmp_path / "nolabels.npz", embeddings=x)
    with pytest.raises(DataError, match="no 'labels'"):
        load_npz(tmp_path / "nolabels.npz")
    np.savez(tmp_path / "shape.npz", embeddings=x, labels=y[:-2])
    with pytest.raises(DataError, match="one label per embedding"):
        load_npz(tmp_path / "shape.npz")
    np.savez(tmp_path / "onemask.npz", embeddings=x, labels=y, query_mask=np.ones(len(y), bool))
    with pytest.raises(DataError, match="other mask"):
        load_npz(tmp_path / "onemask.npz")
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(DataError, match="cannot read"):
        load_npz(tmp_path / "junk.npz")


def test_parse_set_options():
    got = parse_set_options(["recall.k=[1, 5]", "opis.far_range=[0.01, 0.2]", "opis.utility=pr"],
                            ["recall", "opis"])
    assert got == {"recall": {"k": [1, 5]}, "opis": {"far_range": [0.01, 0.2], "utility": "pr"}}
    with pytest.raises(RecipeError, match="not selected"):
        parse_set_options(["nmi.iterations=3"], ["recall"])
    with pytest.raises(RecipeError, match="cannot read"):
        parse_set_options(["recall=3"], ["recall"])


def test_cli_evaluate_json_and_table(tmp_path, data):
    from dmlplug.cli import build_app

    x, y = data
    q = np.zeros(len(y), bool)
    q[::2] = True
    path = tmp_path / "emb.npz"
    np.savez(path, embeddings=x, labels=y, query_mask=q, gallery_mask=~q)
    runner = CliRunner()
    result = runner.invoke(build_app(), ["evaluate", str(path), "--json", "-e", "recall", "-e", "opis",
                                         "--set", "recall.k=[1,2]"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    assert list(got) == ["recall@1", "recall@2", "opis", "excluded_queries"]
    want = evaluate(x, y, [{"name": "recall", "k": [1, 2]}, "opis"], query_mask=q, gallery_mask=~q)
    assert got == pytest.approx(want)
    table = runner.invoke(build_app(), ["evaluate", str(path)])
    assert table.exit_code == 0 and "map@r" in table.output and "kNN backend: faiss-cpu" in table.output


def test_cli_bad_input_is_a_user_error(tmp_path):
    from dmlplug.cli import build_app

    result = CliRunner().invoke(build_app(), ["evaluate", str(tmp_path / "nope.npz")])
    assert isinstance(result.exception, DmlplugError)
    result = CliRunner().invoke(build_app(), ["evaluate", str(tmp_path / "nope.npz"), "-e", "nmii"])
    assert isinstance(result.exception, ComponentError)


def test_plugin_and_evaluation_package_do_not_import_torch():
    code = ("import sys, dmlplug_builtins.evaluators, dmlplug.evaluation, dmlplug.evaluation.api, "
            "dmlplug.evaluation.opis, dmlplug_builtins.evaluators.structure, dmlplug_builtins.evaluators.verification, "
            "dmlplug_builtins.evaluators.clustering, dmlplug_builtins.evaluators.opis, "
            "dmlplug_builtins.evaluators.retrieval; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _split_without_shared_classes(data):
    """Queries and gallery with disjoint classes: no query has a relevant gallery item."""
    x, y = data
    q = y < np.median(y)
    return x, y, q, ~q


def test_no_valid_query_is_an_error_naming_the_cause(data):
    x, y, q, g = _split_without_shared_classes(data)
    with pytest.raises(DataError, match="no valid query") as info:
        evaluate(x, y, query_mask=q, gallery_mask=g)
    assert f"excluded_queries = {int(q.sum())}" in str(info.value) and "query_mask" in info.value.fix
    # without a kNN evaluator the split is fine: clustering metrics need no query
    assert set(evaluate(x, y, ["nmi"], query_mask=q, gallery_mask=g)) == {"nmi"}
    # some lone queries are reported, not refused
    q2 = q.copy()
    q2[np.flatnonzero(~q)[0]] = True
    metrics = evaluate(x, y, query_mask=q2, gallery_mask=np.ones(len(y), bool))
    assert metrics["excluded_queries"] >= 0 and np.isfinite(metrics["recall@1"])


def test_cli_no_valid_query_exits_non_zero(tmp_path, data):
    x, y, q, g = _split_without_shared_classes(data)
    path = tmp_path / "disjoint.npz"
    np.savez(path, embeddings=x, labels=y, query_mask=q, gallery_mask=g)
    proc = subprocess.run([sys.executable, "-m", "dmlplug", "evaluate", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2, proc
    assert "no valid query" in proc.stderr and str(path) in proc.stderr and "nan" not in proc.stdout


def test_bad_npz_files_name_the_file_the_array_and_the_fix(tmp_path, data):
    x, y = data
    (tmp_path / "text.npz").write_text("not a zip")
    np.save(tmp_path / "single.npy", x)
    (tmp_path / "single.npy").rename(tmp_path / "single.npz")
    np.savez(tmp_path / "objects.npz", embeddings=np.array([object()] * len(y)), labels=y)
    bad = x.copy()
    bad[[3, 5]] = np.nan
    bad[9, 0] = np.inf
    np.savez(tmp_path / "nan.npz", embeddings=bad, labels=y)
    nan_labels = y.astype(float)
    nan_labels[2] = np.nan
    np.savez(tmp_path / "nanlabels.npz", embeddings=x, labels=nan_labels)
    cases = {
        "text.npz": ("not an .npz file", "text.npz"),
        "single.npz": ("single .npy array", "single.npz"),
        "objects.npz": ("array 'embeddings'", "objects.npz:embeddings"),
        "nan.npz": ("'embeddings' rows 3, 5, 9 (3 of", "nan.npz:embeddings[3]"),
        "nanlabels.npz": ("'labels' row 2 (1 of", "nanlabels.npz:labels[2]"),
    }
    for name, (what, where) in cases.items():
        with pytest.raises(DataError) as info:
            load_npz(tmp_path / name)
        message = info.value.render()
        assert what in message and where in info.value.where and name in info.value.what, message
        assert info.value.fix and "pickle" not in message.lower(), message

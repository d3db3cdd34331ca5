"""The third example distribution, ``examples/dmlplug-example-geometry``: kinds that only built-ins could add before.

It registers the distance ``example_manhattan`` (a PML ``BaseDistance``, so every PML loss and miner takes it in
its nested ``distance`` table) and the learning-rate schedule ``example_linear_decay`` (``[scheduler] name``).
Known answers for both, then the whole third-party path: pip install, list, validate, train.
"""

import importlib
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from e2e import LEARNING_PROTOCOL, ROOT, TINY_RECIPE, assert_learns, run_cli
from test_example_plugin import EXAMPLES, pip_install

import dmlplug
from dmlplug import BuildContext
from dmlplug.protocols import Distance, LRSchedule

PLUGIN, DIST = "example_geometry", "dmlplug-example-geometry"
LOSS = """[loss]
name = "contrastive"
pos_margin = 0.0
neg_margin = 4.0
distance = {name = "example_manhattan"}
"""
SCHEDULE = """
[scheduler]
name = "example_linear_decay"
warmup_epochs = 1
final_fraction = 0.2
[[loggers]]
name = "tensorboard"
"""
GEOMETRY_RECIPE = TINY_RECIPE.replace('[loss]\nname = "multi_similarity"\n', LOSS) + SCHEDULE
assert 'distance = {name = "example_manhattan"}' in GEOMETRY_RECIPE  # the replacement matched


@pytest.fixture(scope="module")
def geometry_site(tmp_path_factory):
    """dmlplug-example-geometry installed into a private folder (for PYTHONPATH)."""
    return pip_install(DIST, tmp_path_factory.mktemp("geometry") / "site")


@pytest.fixture
def host(geometry_site, monkeypatch):
    """A plugin host that found the installed distribution through its entry point, in this process."""
    from dmlplug.plugins import PluginHost

    monkeypatch.syspath_prepend(str(geometry_site))
    importlib.invalidate_caches()
    loaded = PluginHost().load()
    assert loaded.records[PLUGIN].error is None
    return loaded


def l1(a, b):
    return sum(abs(x - y) for x, y in zip(a, b, strict=True))


def unit(v):
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


Q = [[1.0, 0.0, 0.0], [0.0, 3.0, 4.0], [1.0, -2.0, 2.0]]
R = [[2.0, -1.0, 0.0], [0.5, 0.5, -1.0]]


# ------------------------------------------------------------------------------------------------- the distance


@pytest.mark.parametrize("normalize", [False, True])
def test_manhattan_matrix_is_the_brute_force_l1_sum(host, normalize):
    from dmlplug_example_geometry.manhattan import ManhattanDistance

    distance = dmlplug.create("distance", "example_manhattan", BuildContext(host=host), normalize_embeddings=normalize)
    assert type(distance) is ManhattanDistance and isinstance(distance, Distance) and distance.is_inverted is False
    prep = unit if normalize else list
    q, r = [prep(v) for v in Q], [prep(v) for v in R]
    got = distance(torch.tensor(Q, dtype=torch.float64), torch.tensor(R, dtype=torch.float64))
    assert torch.allclose(got, torch.tensor([[l1(a, b) for b in r] for a in q], dtype=torch.float64))
    if not normalize:  # one entry by hand: |1 - 2| + |0 + 1| + |0 - 0|
        assert got[0, 0].item() == 2.0
    square = distance(torch.tensor(Q, dtype=torch.float64))  # ref_emb = query_emb
    assert torch.allclose(square, torch.tensor([[l1(a, b) for b in q] for a in q], dtype=torch.float64))
    assert torch.equal(square, square.t()) and torch.all(square.diagonal() == 0)
    rows = distance.pairwise_distance(torch.tensor(Q[:2]), torch.tensor(R))
    assert torch.allclose(rows, torch.tensor([l1(Q[0], R[0]), l1(Q[1], R[1])]))
    half = distance(torch.tensor(Q, dtype=torch.bfloat16), torch.tensor(R, dtype=torch.bfloat16))
    assert half.dtype == torch.bfloat16 and torch.allclose(half.double(), got, rtol=2e-2)


def test_a_pml_loss_built_through_the_registry_uses_the_distance(host):
    """Contrastive loss with the Manhattan distance equals the formula on the hand-computed L1 distances."""
    from dmlplug_example_geometry.manhattan import ManhattanDistance

    ctx = BuildContext(host=host)
    loss = dmlplug.create("loss", "contrastive", ctx, pos_margin=0.5, neg_margin=4.0,
                          distance={"name": "example_manhattan", "normalize_embeddings": False})
    assert type(loss.distance) is ManhattanDistance and loss.distance.normalize_embeddings is False
    e = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.5], [2.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    y = [0, 0, 1, 1]
    pos = [max(l1(e[i], e[j]) - 0.5, 0) for i in range(4) for j in range(4) if i != j and y[i] == y[j]]
    neg = [max(4.0 - l1(e[i], e[j]), 0) for i in range(4) for j in range(4) if y[i] != y[j]]
    # PML's contrastive loss: each term averaged over its non-zero pairs (AvgNonZeroReducer), then summed.
    expected = sum(pos) / sum(p > 0 for p in pos) + sum(neg) / sum(n > 0 for n in neg)
    embeddings = torch.tensor(e, requires_grad=True)
    value = loss(embeddings, torch.tensor(y))
    assert value.item() == pytest.approx(expected, rel=1e-6)
    value.backward()
    assert embeddings.grad is not None and torch.isfinite(embeddings.grad).all() and embeddings.grad.abs().sum() > 0
    # The same loss with the built-in lp_distance at p = 1 (no normalisation) agrees: same geometry.
    reference = dmlplug.create("loss", "contrastive", ctx, pos_margin=0.5, neg_margin=4.0,
                               distance={"name": "lp_distance", "p": 1, "normalize_embeddings": False})
    assert reference(torch.tensor(e), torch.tensor(y)).item() == pytest.approx(expected, rel=1e-5)


def test_a_typo_in_the_distance_name_is_caught_with_a_suggestion(host):
    from dmlplug.errors import DmlplugError

    with pytest.raises(DmlplugError, match="unknown distance 'example_manhatan'.*did you mean 'example_manhattan'"):
        dmlplug.create("loss", "contrastive", BuildContext(host=host), distance={"name": "example_manhatan"})


# ------------------------------------------------------------------------------------------------- the schedule


def _optimizer():
    weights = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    return torch.optim.SGD([{"params": [weights[0]], "lr": 0.1}, {"params": [weights[1]], "lr": 0.02}], lr=0.1)


def _schedule(host, optimizer, **params):
    ctx = BuildContext(host=host, optimizer=optimizer, epochs=6)
    return dmlplug.create("lr_schedule", "example_linear_decay", ctx, **params)


def _lrs(optimizer):
    return [group["lr"] for group in optimizer.param_groups]


# 6 epochs, 2 of warm-up, final_fraction 0.25: warm-up (e + 1) / 3, then 1 - 0.75 · (e - 2) / 3, then 0.25 for ever.
WARMUP_FACTORS = [1 / 3, 2 / 3, 1.0, 0.75, 0.5, 0.25, 0.25, 0.25]
# No warm-up, final_fraction 0.1: 1 - 0.9 · e / 5.
PLAIN_FACTORS = [1.0, 0.82, 0.64, 0.46, 0.28, 0.1, 0.1]


@pytest.mark.parametrize(("params", "factors"), [({"warmup_epochs": 2, "final_fraction": 0.25}, WARMUP_FACTORS),
                                                 ({}, PLAIN_FACTORS)], ids=["warmup", "defaults"])
def test_linear_decay_learning_rates_by_hand(host, params, factors):
    from dmlplug_example_geometry.linear_decay import LinearDecay

    optimizer = _optimizer()
    schedule = _schedule(host, optimizer, **params)
    assert type(schedule) is LinearDecay and isinstance(schedule, LRSchedule)
    seen = []
    for epoch in range(len(factors)):
        if epoch:
            schedule.step_epoch(metric=0.5 if epoch % 2 else None)  # the metric is ignored
        seen.append(_lrs(optimizer))
    assert seen == [pytest.approx([0.1 * f, 0.02 * f], abs=1e-12) for f in factors]


def test_linear_decay_state_survives_a_checkpoint(host):
    optimizer = _optimizer()
    schedule = _schedule(host, optimizer, warmup_epochs=2, final_fraction=0.25)
    for _ in range(3):
        schedule.step_epoch(None)
    state = json.loads(json.dumps(schedule.state_dict()))  # plain data
    assert state == {"epoch": 3, "base_lrs": [0.1, 0.02]}

    # A resumed run builds the optimizer and schedule afresh (epoch 0 rates), then loads the checkpoint.
    fresh_optimizer = _optimizer()
    fresh = _schedule(host, fresh_optimizer, warmup_epochs=2, final_fraction=0.25)
    assert _lrs(fresh_optimizer) == pytest.approx([0.1 / 3, 0.02 / 3])
    fresh.load_state_dict(state)
    assert _lrs(fresh_optimizer) == pytest.approx([0.075, 0.015]) == _lrs(optimizer)
    for _ in range(3):
        schedule.step_epoch(None)
        fresh.step_epoch(0.9)
        assert _lrs(fresh_optimizer) == _lrs(optimizer)
    assert _lrs(optimizer) == pytest.approx([0.025, 0.005]) and fresh.state_dict() == schedule.state_dict()


def test_the_schedule_needs_an_optimizer(host):
    from dmlplug.errors import ComponentError

    with pytest.raises(ComponentError, match="needs optimizer"):
        dmlplug.create("lr_schedule", "example_linear_decay", BuildContext(host=host, epochs=3))


# ------------------------------------------------------------------------------------------------- third-party path


def test_the_example_passes_the_plugin_kit(host):
    """The contract checks built-ins get, run on a third party's distance and LR schedule."""
    from dmlplug.testing import check_plugin

    assert check_plugin("dmlplug_example_geometry") == [("distances", "example_manhattan"),
                                                        ("lr_schedules", "example_linear_decay")]


def test_the_example_passes_ruff():
    command = ["ruff", "check", "--config", str(ROOT / "pyproject.toml"), "--no-cache", str(EXAMPLES / DIST)]
    proc = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_importing_the_plugin_does_not_import_torch(geometry_site):
    code = "import sys, dmlplug_example_geometry; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(geometry_site)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_installed_plugin_lists_and_validates(geometry_site, tmp_path):
    env = {"PYTHONPATH": str(geometry_site)}
    plugins = run_cli("plugins", "--json", env=env)
    assert plugins.returncode == 0, plugins.stderr
    record = next(p for p in json.loads(plugins.stdout) if p["name"] == PLUGIN)
    assert (record["distribution"], record["version"], record["error"]) == (DIST, "0.1.0", None)
    assert record["hooks"] == ["register_distances", "register_lr_schedules"]
    for kind, name in (("distances", "example_manhattan"), ("lr_schedules", "example_linear_decay")):
        listed = run_cli("list", kind, env=env)
        assert listed.returncode == 0, listed.stderr
        line = next(line for line in listed.stdout.splitlines() if name in line)
        assert f"({PLUGIN})" in line

    recipe = tmp_path / "geometry.toml"
    recipe.write_text(GEOMETRY_RECIPE)
    proc = run_cli("validate", recipe, env=env)
    assert proc.returncode == 0, proc.stderr
    for good, typo in (("example_manhattan", "example_manhatan"), ("example_linear_decay", "example_linear_decy")):
        bad = tmp_path / f"{typo}.toml"
        bad.write_text(GEOMETRY_RECIPE.replace(f'"{good}"', f'"{typo}"'))
        proc = run_cli("validate", bad, env=env)
        assert proc.returncode == 2, proc.stderr
        assert typo in proc.stderr and f"did you mean '{good}'" in proc.stderr and "Traceback" not in proc.stderr
    # Without the distribution the recipe names components nobody registered: validate says so.
    missing = run_cli("validate", recipe)
    assert missing.returncode == 2 and "example_manhattan" in missing.stderr


@pytest.fixture(scope="module")
def geometry_run(geometry_site, tmp_path_factory):
    """The recipe trained from the command line under the learning protocol (5 epochs, initial evaluation)."""
    folder = tmp_path_factory.mktemp("geometry_run")
    recipe = folder / "geometry.toml"
    recipe.write_text(GEOMETRY_RECIPE)
    args = [arg for pair in LEARNING_PROTOCOL for arg in ("--set", pair)]
    proc = run_cli("run", recipe, "--out", folder / "run", "--quiet", *args,
                   env={"PYTHONPATH": str(geometry_site)})
    assert proc.returncode == 0, proc.stderr
    return folder / "run"


@pytest.mark.slow
def test_run_decays_the_learning_rate_as_the_schedule_says(geometry_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    results = json.loads((geometry_run / "results.json").read_text())
    assert results["status"] == "completed"
    acc = EventAccumulator(str(geometry_run / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    steps_per_epoch = results["steps"] // 5
    # 5 epochs, 1 of warm-up, final_fraction 0.2: epoch 1 at lr/2, then 1, 1 - 0.8/3, 1 - 1.6/3, 0.2 (of 1e-3).
    factors = [0.5, 1.0, 1 - 0.8 / 3, 1 - 1.6 / 3, 0.2]
    for group in ("backbone", "head"):
        events = acc.Scalars(f"train/lr/{group}")  # logged at the first step of every epoch
        assert [e.value for e in events] == pytest.approx([1e-3 * f for f in factors], rel=1e-6)
        assert [e.step for e in events] == [epoch * steps_per_epoch for epoch in range(5)]
    state = torch.load(geometry_run / "checkpoints" / "last.pt", weights_only=False)
    assert state["scheduler"] == {"epoch": 5, "base_lrs": [1e-3, 1e-3]}
    assert [g["lr"] for g in state["optimizer"]["param_groups"]] == pytest.approx([2e-4, 2e-4])
    recipe = (geometry_run / "recipe.resolved.toml").read_text()
    assert "example_manhattan" in recipe and "example_linear_decay" in recipe


@pytest.mark.slow
def test_training_with_the_distance_beats_the_untrained_model(geometry_run):
    assert_learns(geometry_run)  # by e2e.LEARNS_BY standard errors, as the method recipes

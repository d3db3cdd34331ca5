"""The steps of ``benchmarks/gpu_check.py``, in order: GPU sizes, and the toy sizes of ``--dry-run-cpu``.

Each step is a function of the :class:`gpu_check.Context` returning its numbers; it raises ``StepFailed`` when
its check does not hold and ``StepSkipped`` when it cannot run here. Trainings go through
``benchmarks/gpu_probe.py runs`` (``dmlplug.run``, measured), the speed comparisons through the benchmark
scripts themselves with their own flags (``--quick`` in the dry run).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_check import ROOT, Context, StepFailed, StepSkipped, StepTimeout
from train_speed import PRESETS, dmlplug_overrides

QUICKSTART = "recipes/quickstart.toml"
SOP_RECIPE = "recipes/sop_arcface_tcm.toml"
#: The quickstart at toy size (tests/shared/e2e.py's tiny recipe): seconds on a 2-core CPU.
TOY = ["data.dataset.num_classes=40", "data.dataset.images_per_class=8", "data.batch_size=16", "data.sampler.m=4",
       "data.sampler.batches_per_epoch=4", "head.embedding_size=16", "evaluation.pictures=false",
       "evaluation.initial=false", "run.log_every=1"]
#: recall@1 of bf16/fp16 within this of fp32's counts as comparable: quickstart's seed-to-seed standard deviation
#: is ~0.014 (docs/performance.md), so 0.05 is ~3.5 of them.
RECALL_TOLERANCE = 0.05


@dataclass
class Step:
    """One check: its name, what it shows, its time bound on the GPU and in the dry run, and its function."""

    name: str
    title: str
    bound_s: float
    dry_bound_s: float
    fn: Callable[[Context], dict[str, Any]]


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    return path


def _quick(ctx: Context, *extra: str) -> list[str]:
    """The quickstart recipe's overrides for this mode: on the GPU, CUDA; in the dry run, the toy size."""
    return [*(TOY + ["run.device=cpu"] if ctx.dry else ["run.device=cuda"]), *extra]


def _probe_runs(ctx: Context, name: str, entries: list[dict[str, Any]],
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """Train each entry through gpu_probe.py in one process; each run's measured record, by label."""
    for entry in entries:
        _fresh(Path(entry["out"]))
    spec, out = ctx.work / f"{name}.spec.json", ctx.work / f"{name}.result.json"
    spec.write_text(json.dumps(entries))
    out.unlink(missing_ok=True)
    try:
        ctx.run(["python", "benchmarks/gpu_probe.py", "runs", str(spec), str(out)], log=f"{name}.log", env=env)
    except (StepTimeout, StepFailed) as stopped:
        # The probe rewrites its file after every run: the runs that finished are still numbers worth keeping.
        stopped.numbers = json.loads(out.read_text()) if out.is_file() else {}  # type: ignore[attr-defined]
        raise
    results = json.loads(out.read_text())
    bad = {label: r.get("error") or r["status"] for label, r in results.items() if r["status"] != "completed"}
    if bad:
        raise StepFailed(f"runs not completed: {bad}")
    nonfinite = {label: r["nonfinite"] for label, r in results.items() if r["nonfinite"]}
    if nonfinite:
        raise StepFailed(f"non-finite loss terms: {nonfinite}")
    return results


def doctor(ctx: Context) -> dict[str, Any]:
    done = ctx.run(["python", "-m", "dmlplug", "doctor", "--json"], check=False)
    checks = json.loads(done.stdout)
    numbers = {c["name"]: f"{c['status']}: {c['detail']}" for c in checks}
    errors = [c["name"] for c in checks if c["status"] == "error"]
    cuda = next((c for c in checks if c["name"] == "cuda"), None)
    if not ctx.dry and (cuda is None or cuda["status"] != "ok"):
        errors.append("cuda")
    numbers["pip_freeze"] = _installed_versus_pinned()
    if errors:
        raise StepFailed(f"doctor reports {errors}")
    return numbers


def _installed_versus_pinned() -> dict[str, str]:
    """For each package of benchmarks/gpu_wheels.txt whose installed version is not the pinned one: both.

    The offline install carries only what the GPU image lacks (``--skip-image``): the image's own versions of the
    others are what the check runs on, and the report must say which they are.
    """
    from importlib import metadata

    from gpu_wheels import LIST, parse_pins

    differ = {}
    for name, pinned in sorted(parse_pins(LIST.read_text()).items()):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "absent"
        if installed != pinned:
            differ[name] = f"{installed} (pinned {pinned})"
    return differ


def pytest_suite(ctx: Context) -> dict[str, Any]:
    if ctx.dry:
        cmd = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/core/test_install.py"]
    else:
        # The dry run of this very script is a CPU test (minutes of toy runs): no GPU minute is spent on it.
        cmd = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-ra", "--deselect",
               "tests/gpu/test_gpu_check.py::test_the_dry_run_runs_every_step_on_the_cpu"]
    try:
        import xdist  # noqa: F401 - the GPU image has pytest-xdist: 8 workers fit the 10-minute limit

        cmd += ["-n", "0" if ctx.dry else "8"]
    except ImportError:
        # pyproject.toml's addopts name xdist's `-n auto`, which pytest refuses without the plugin: run in one
        # process with the rest of those options.
        cmd += ["-o", "addopts=-ra --strict-markers"]
    try:
        done = ctx.run(cmd, log="pytest.log", check=False)
    except StepTimeout:
        # Cut at its bound: what pytest printed (the tests that ran, failures first with -n) still comes back.
        shutil.copyfile(ctx.work / "logs" / "pytest.log", ctx.out / "pytest.log")
        raise
    (ctx.out / "pytest.log").write_text(done.stdout)  # the whole log comes back with the report
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    numbers: dict[str, Any] = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed)",
                                                                   summary)}
    numbers["summary"], numbers["command"] = summary, " ".join(cmd[1:])
    if done.returncode != 0:
        raise StepFailed(f"pytest exit status {done.returncode}: {summary} (pytest.log)")
    return numbers


def _sop_root(ctx: Context) -> Path:
    return ctx.work / "sop" / "Stanford_Online_Products"


def sop_data(ctx: Context) -> dict[str, Any]:
    root, record = _sop_root(ctx), ctx.work / "sop_data.json"
    if record.is_file() and (root / "Ebay_test.txt").is_file():
        return {**json.loads(record.read_text()), "reused": True}
    _fresh(root)
    sizes = (["--train-classes", "12", "--test-classes", "12", "--size", "48", "--procs", "2"] if ctx.dry
             else ["--train-classes", "11318", "--test-classes", "11316", "--size", "96"])
    ctx.run(["python", "benchmarks/gpu_probe.py", "sop-data", str(root), "--per-class", "5", "--json",
             str(record), *sizes])
    return json.loads(record.read_text())


def sop_run(ctx: Context) -> dict[str, Any]:
    root = _sop_root(ctx)
    if not (root / "Ebay_test.txt").is_file():
        raise StepSkipped("no synthetic SOP tree: the sop_data step did not run")
    common = [f"data.dataset.root={root}", "backbone.pretrained=false", "run.epochs=1", "evaluation.initial=false",
              "evaluation.select_on=test"]
    sizes = (["run.device=cpu", "backbone.model=resnet10t", "data.image_size=32", "data.batch_size=16",
              "data.eval_batch_size=64", "data.workers=0", "data.sampler.batches_per_epoch=3", "run.log_every=1"]
             if ctx.dry else ["run.device=cuda", "data.sampler.batches_per_epoch=200", "data.eval_batch_size=512"])
    runs = _probe_runs(ctx, "sop_run", [{"label": "sop", "recipe": SOP_RECIPE, "overrides": common + sizes,
                                         "out": str(ctx.work / "sop_run"), "skip": 1 if ctx.dry else 40}])
    r = runs["sop"]
    tcm = {k: v for k, v in r["losses"].items() if "tcm" in k}
    return {"images_per_s": r["images_per_s"], "gpu_peak_mib": r.get("gpu_peak_mib"), "steps": r["steps"],
            "eval_seconds": r["eval_seconds"], "tcm_term": tcm, "opis": r["metrics"].get("opis"),
            "recall@1": r["metrics"].get("recall@1"), "losses": r["losses"], "seconds": r["seconds"]}


def precision(ctx: Context) -> dict[str, Any]:
    epochs = ["run.epochs=1"] if ctx.dry else ["run.epochs=3", "evaluation.every=3"]
    runs = _probe_runs(ctx, "precision", [
        {"label": p, "recipe": QUICKSTART, "overrides": _quick(ctx, *epochs, f"run.precision={p}"),
         "out": str(ctx.work / "precision" / p)} for p in ("fp32", "bf16", "fp16")])
    recall = {p: r["metrics"].get("recall@1") for p, r in runs.items()}
    numbers = {f"recall@1_{p}": v for p, v in recall.items()}
    numbers.update({f"images_per_s_{p}": r["images_per_s"] for p, r in runs.items()})
    far = {p: v for p, v in recall.items() if abs(v - recall["fp32"]) > RECALL_TOLERANCE}
    if far:
        raise StepFailed(f"recall@1 {far} differs from fp32's {recall['fp32']} by more than {RECALL_TOLERANCE}")
    return numbers


def knn(ctx: Context) -> dict[str, Any]:
    out = ctx.work / "knn.json"
    size = ["--n", "2000", "--dim", "64", "--device", "cpu"] if ctx.dry else ["--n", "60000", "--dim", "512"]
    ctx.run(["python", "benchmarks/gpu_probe.py", "knn", str(out), *size])
    found = json.loads(out.read_text())
    found["target_all_metrics_under_1s"] = found["device_seconds_median"] < 1.0
    if found["max_abs_diff"] > 1e-6:
        raise StepFailed(f"the device kNN metrics differ from the CPU's by up to {found['max_abs_diff']:.3g}")
    return found


def faiss_gpu(ctx: Context) -> dict[str, Any]:
    out = ctx.work / "faiss.json"
    ctx.run(["python", "benchmarks/gpu_probe.py", "faiss", str(out)])
    found = json.loads(out.read_text())
    if "skip" in found:
        raise StepSkipped(found["skip"])
    if found["max_abs_diff_vs_torch"] > 1e-6:
        raise StepFailed(f"faiss-gpu's metrics differ from the torch backend's by {found['max_abs_diff_vs_torch']}")
    return found


def compile_speed(ctx: Context) -> dict[str, Any]:
    preset, steps, skip = (PRESETS["cpu"], 4, 1) if ctx.dry else (PRESETS["gpu"], 50, 20)
    base = dmlplug_overrides(preset, 0 if ctx.dry else 8, steps) + [f"run.log_every={1 if ctx.dry else 10}"]
    if ctx.dry:
        base += TOY[:2] + ["data.batch_size=16"]
    variants = {"eager": ["run.channels_last=false"], "channels_last": ["run.channels_last=true"],
                "compile_channels_last": ["run.channels_last=true", "run.compile=true"]}
    if ctx.dry:  # the dry run only proves the path: one eager run, one through run.compile
        del variants["channels_last"]
    runs = _probe_runs(ctx, "compile", [
        {"label": k, "recipe": QUICKSTART, "overrides": base + v, "out": str(ctx.work / "compile" / k), "skip": skip}
        for k, v in variants.items()], env={"TORCH_COMPILE_DISABLE": "1"} if ctx.dry else None)
    rates = {k: r["images_per_s"] for k, r in runs.items()}
    numbers: dict[str, Any] = {f"images_per_s_{k}": v for k, v in rates.items()}
    if all(rates.values()):
        if "channels_last" in rates:
            numbers["speedup_channels_last"] = round(rates["channels_last"] / rates["eager"], 3)
        numbers["speedup_compile_channels_last"] = round(rates["compile_channels_last"] / rates["eager"], 3)
    if ctx.dry:
        numbers["note"] = "dry run: TORCH_COMPILE_DISABLE=1 (inductor takes minutes on a 2-core CPU)"
    return numbers


def deterministic(ctx: Context) -> dict[str, Any]:
    extra = ["run.deterministic=true", "run.epochs=1"] + ([] if ctx.dry else ["data.sampler.batches_per_epoch=40"])
    runs = _probe_runs(ctx, "deterministic", [
        {"label": k, "recipe": QUICKSTART, "overrides": _quick(ctx, *extra), "out": str(ctx.work / "determ" / k)}
        for k in ("a", "b")])
    a, b = runs["a"], runs["b"]
    numbers = {"identical_weights": a["model_digest"] == b["model_digest"], "identical_metrics":
               a["metrics"] == b["metrics"], "recall@1": a["metrics"].get("recall@1"), "seconds": a["seconds"]}
    if not (numbers["identical_weights"] and numbers["identical_metrics"]):
        raise StepFailed(f"two deterministic runs differ: {numbers}")
    return numbers


def resume(ctx: Context) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    from stalling import STALL_AFTER_EVAL  # the resume tests' kill point: right after epoch 1's evaluation

    overrides = _quick(ctx, "run.epochs=2", "evaluation.every=1", "run.checkpoint_every_steps=3",
                       "run.deterministic=true", *([] if ctx.dry else ["data.sampler.batches_per_epoch=20"]))
    full = _probe_runs(ctx, "resume_full", [{"label": "full", "recipe": QUICKSTART, "overrides": overrides,
                                             "out": str(ctx.work / "resume" / "full")}])["full"]
    killed, script, marker = ctx.work / "resume" / "killed", ctx.work / "stall.py", ctx.work / "stalled"
    _fresh(killed)
    script.write_text(STALL_AFTER_EVAL)
    marker.unlink(missing_ok=True)
    sets = [a for o in overrides for a in ("--set", o)]
    child = subprocess.Popen([sys.executable, str(script), str(marker), "run", QUICKSTART, "--out", str(killed),
                              "--quiet", *sets], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not marker.exists() and child.poll() is None and ctx.remaining() > 0:
            time.sleep(0.2)
    finally:
        child.kill()  # SIGKILL: no handler runs, as when a machine dies
        child.wait()
    if not marker.exists():
        raise StepFailed(f"the run to be killed never reached epoch 1's evaluation (exit {child.returncode})")
    ctx.run(["python", "-m", "dmlplug", "run", str(killed), "--resume", "--quiet"], log="resume.log")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_probe import model_digest

    def lines(run: Path) -> list[dict]:
        return [{k: v for k, v in json.loads(x).items() if k != "time"}
                for x in (run / "metrics.jsonl").read_text().splitlines()]

    resumed = json.loads((killed / "results.json").read_text())
    numbers = {"killed_at_step": int(marker.read_text()), "status": resumed["status"],
               "identical_weights": model_digest(killed / "checkpoints" / "last.pt") == full["model_digest"],
               "identical_metrics_jsonl": lines(killed) == lines(Path(full["out"])),
               "identical_results": resumed == json.loads((Path(full["out"]) / "results.json").read_text())}
    if not all(v for k, v in numbers.items() if k.startswith("identical")):
        raise StepFailed(f"the resumed run differs from the uninterrupted one: {numbers}")
    return numbers


def ddp(ctx: Context) -> dict[str, Any]:
    out = _fresh(ctx.work / "ddp")
    sets = [a for o in _quick(ctx, "run.epochs=1") for a in ("--set", o)]
    ctx.run(["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m", "dmlplug", "run",
             QUICKSTART, "--out", str(out), "--quiet", *sets], log="ddp.log")
    results = json.loads((out / "results.json").read_text())
    env = json.loads((out / "environment.json").read_text())
    numbers = {"status": results["status"], "recall@1": results["metrics"].get("recall@1"),
               "backend": "gloo" if ctx.dry else "nccl",
               **{k: v for k, v in env.items() if k in ("world_size", "device", "distributed")}}
    if results["status"] != "completed":
        raise StepFailed(f"the torchrun run ended {results['status']}")
    return numbers


def _bench(ctx: Context, script: str, args: list[str], patterns: dict[str, str]) -> dict[str, Any]:
    done = ctx.run(["python", f"benchmarks/{script}", *args], log=script.replace(".py", ".log"))
    numbers: dict[str, Any] = {"command": " ".join([script, *args])}
    for key, pattern in patterns.items():
        found = re.findall(pattern, done.stdout, flags=re.M)
        if not found:
            raise StepFailed(f"{script} printed no line matching {pattern!r}")
        numbers[key] = [float(x) for x in found] if len(found) > 1 else float(found[0])
    return numbers


def bench_train(ctx: Context) -> dict[str, Any]:
    args = (["--quick", "--workers", "0", "--steps", "5", "--warmup", "1", "--against", "hand"] if ctx.dry
            else ["--preset", "gpu", "--rounds", "3", "--steps", "40", "--against", "hand"])
    numbers = _bench(ctx, "train_speed.py", args, {"ratio_dmlplug_over_bare_step": r"ratio dmlplug / hand = ([\d.]+)",
                                                   "images_per_s": r"median step .*? (\d+) images/s"})
    ratio = numbers["ratio_dmlplug_over_bare_step"]
    ratios = ratio if isinstance(ratio, list) else [ratio]
    numbers["images_per_s_ratio"] = [round(1 / r, 3) for r in ratios]
    numbers["target_0.97_met"] = all(1 / r >= 0.97 for r in ratios) if not ctx.dry else None
    return numbers


def bench_eval(ctx: Context) -> dict[str, Any]:
    args = ["--quick"] if ctx.dry else ["--sets", "sop512", "--repeats", "1"]
    return _bench(ctx, "eval_speed.py", args, {"dmlplug_ms": r"^\s*dmlplug\s+([\d.]+) ms",
                                               "time_ratio_dmlplug_over_pml": r"ratio dmlplug/PML: time ([\d.]+)x"})


def bench_data(ctx: Context) -> dict[str, Any]:
    args = (["--quick", "--workers", "0"] if ctx.dry
            else ["--workers", "8,15", "--images", "2048", "--epochs", "3", "--rounds", "5", "--device", "cuda"])
    return _bench(ctx, "data_throughput.py", args, {"steady_images_per_s": r"^\s*\d+\s+\S+\s+[\d.]+\s+([\d.]+)\s",
                                                    "projection_images_per_s": r"= (\d+) images/s on"})


STEPS = [
    #    name, title, bound on the GPU (s), bound in the dry run on a 2-core CPU (s), function
    Step("doctor", "dmlplug doctor: torch, CUDA, GPU, faiss flavour", 60, 90, doctor),
    Step("pytest", "the whole test suite with CUDA available (dry run: tests/core/test_install.py)",
         540, 150, pytest_suite),
    Step("sop_data", "a synthetic SOP tree in the official layout (11,318 / 11,316 classes x 5 JPEGs)",
         90, 60, sop_data),
    Step("sop_run", "recipes/sop_arcface_tcm.toml, random weights, 200 steps, one 56k-image evaluation, bf16",
         150, 150, sop_run),
    Step("precision", "quickstart in fp32, bf16, fp16: finite losses, comparable recall@1", 100, 180, precision),
    Step("knn", "kNN metrics of 60k x 512 on the GPU equal the CPU's; time of all of them", 60, 90, knn),
    Step("faiss_gpu", "faiss-gpu, if importable: its metrics equal the torch backend's", 20, 60, faiss_gpu),
    Step("compile", "images/s of ResNet-50 224 px bf16: eager, channels_last, torch.compile + channels_last",
         180, 180, compile_speed),
    Step("deterministic", "run.deterministic: two runs bit-identical on the GPU", 60, 150, deterministic),
    Step("resume", "SIGKILL after an evaluation, resume: identical to an uninterrupted run", 90, 240, resume),
    Step("ddp", "a 1-process torchrun run (NCCL; dry run: gloo)", 60, 120, ddp),
    Step("bench_train", "benchmarks/train_speed.py --preset gpu (target: dmlplug >= 0.97x bare images/s)",
         150, 180, bench_train),
    Step("bench_eval", "benchmarks/eval_speed.py on the 60k x 512 set", 90, 120, bench_eval),
    Step("bench_data", "benchmarks/data_throughput.py with 8 and 15 workers", 90, 120, bench_data),
]

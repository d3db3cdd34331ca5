"""``dmlplug oodml splits | run | summarize`` and ``dmlplug fewshot``: ooDML and few-shot from the command line.

The plugin's ``register_commands`` hookimpl (``plugins/oodml/__init__.py``) adds the ``cmd_*`` functions of
this module. The work happens in :mod:`.features`, :mod:`.sweep`, :mod:`.summary` and :mod:`.fewshot`; they are
imported inside the commands so the CLI starts without torch. See ``docs/oodml.md`` and ``docs/fewshot.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer


def int_list(text: str, option: str) -> list[int]:
    """``"2,5,10"`` -> ``[2, 5, 10]`` for a CLI option; a clear error for anything else.

    Args:
        text: The option's value, comma-separated integers.
        option: The option's name, for the error message (``"--shots"``).

    Returns:
        The integers, in order.

    Raises:
        RecipeError: ``text`` holds something other than integers, or none.
    """
    from dmlplug.errors import RecipeError

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise RecipeError(f"{option} must be comma-separated integers, got {text!r}", where=option) from None
    if not values:
        raise RecipeError(f"{option} is empty", where=option)
    return values


def _dataset_params(items: list[str] | None) -> dict[str, Any]:
    """``dataset.key=value`` (or ``key=value``) strings -> parameters, values parsed as TOML like ``--set``.

    Args:
        items: The ``--set`` values, or ``None`` when there are none.

    Returns:
        ``parameter name -> value``; a value that is not valid TOML is kept as a string.

    Raises:
        RecipeError: An item is not ``dataset.<parameter>=value``.
    """
    from dmlplug import read_value
    from dmlplug.errors import RecipeError

    params = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        name = key.strip().removeprefix("dataset.")
        if not sep or "." in name or not name:
            raise RecipeError(f"--set {item}: expected dataset.<parameter>=value", where="--set",
                              fix="e.g. --set dataset.num_classes=100")
        params[name] = read_value(text)
    return params


def _iterations(text: str | None) -> dict[int, int] | None:
    """``"2=1000,5=1500"`` -> ``{2: 1000, 5: 1500}`` for ``--iterations``.

    Args:
        text: The option's value, or ``None`` when it was not given.

    Returns:
        ``shot count -> adaptation iterations``, or ``None`` for ``None``.

    Raises:
        RecipeError: ``text`` is not ``shots=count`` pairs of integers.
    """
    from dmlplug.errors import RecipeError

    if text is None:
        return None
    result = {}
    for part in text.split(","):
        try:
            shots, count = part.split("=")
            result[int(shots)] = int(count)
        except ValueError:
            raise RecipeError(f"--iterations must look like 2=1000,5=1500, got {text!r}",
                              where="--iterations") from None
    return result


def cmd_oodml_splits(
    *,  # keyword-only: the required --dataset and --out keep their places among the options in --help
    dataset: Annotated[str, typer.Option(help="Registered dataset name (`dmlplug list datasets`).")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="dataset.param=value (repeatable).")] = None,
    out: Annotated[str, typer.Option(help="Split file to write (JSON).")],
    num_splits: Annotated[int, typer.Option(help="Number of splits, spread evenly over the FID range.")] = 8,
    backbone: Annotated[str, typer.Option(help="timm model of the feature extractor.")] = "resnet50",
    weights: Annotated[str | None, typer.Option(help="Local weights file of the extractor (random weights "
                                                     "without; a warning says so).")] = None,
    extractor_run: Annotated[str | None, typer.Option(help="A dmlplug run (directory or checkpoint) whose trained "
                                                           "backbone and test transform extract the features, "
                                                           "instead of --backbone/--weights/--image-size.")] = None,
    image_size: Annotated[int, typer.Option(help="Input size of the extractor.")] = 224,
    batch_size: Annotated[int, typer.Option(help="Images per forward pass.")] = 64,
    swaps_per_iter: Annotated[int, typer.Option(help="Classes exchanged per swapping iteration (SOP: 1000).")] = 2,
    iterations: Annotated[int, typer.Option(help="Swapping iterations.")] = 25,
    history: Annotated[int, typer.Option(help="Recently swapped slots that may not be swapped again.")] = 5,
    inverse_iterations: Annotated[int, typer.Option(help="Iterations of the inverse run (easier splits); "
                                                         "0: none.")] = 0,
    removal: Annotated[bool, typer.Option(help="Continue with class removal after swapping.")] = True,
    min_remaining: Annotated[float, typer.Option(help="Fraction of each side's images removal keeps.")] = 0.5,
    shots: Annotated[str, typer.Option(help="Few-shot support sizes stored in the file.")] = "2,5,10",
    episodes: Annotated[int, typer.Option(help="Episodes per support size.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of validation partitions and episodes.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
) -> None:
    """Generate ooDML splits of increasing train/test shift for a registered dataset."""
    import warnings

    from dmlplug.devices import resolve_device
    from dmlplug.errors import RecipeError
    from dmlplug_builtins.oodml.features import ExtractorSpec, generate_splits
    from dmlplug_builtins.oodml.splitfile import save_splits

    if extractor_run and weights:
        raise RecipeError("--extractor-run and --weights both name the extractor's weights",
                          where="--extractor-run", fix="give one of them")
    spec = ExtractorSpec(model=backbone, weights=weights, run=extractor_run, image_size=image_size,
                         batch_size=batch_size, device=resolve_device(device))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        split_file = generate_splits(
            dataset, _dataset_params(set_), extractor=spec, num_splits=num_splits,
            swaps_per_iter=swaps_per_iter, iterations=iterations, history=history,
            inverse_iterations=inverse_iterations, removal=removal, min_remaining=min_remaining,
            shots=int_list(shots, "--shots"), episodes=episodes, seed=seed)
    for warning in caught:
        typer.echo(f"warning: {warning.message}", err=True)
    save_splits(out, split_file)
    typer.echo(f"{'id':>3} {'FID':>10} {'train':>6} {'test':>6}  generator")
    for split in split_file.splits:
        typer.echo(f"{split.id:>3} {split.fid:>10.3f} {len(split.train):>6} {len(split.test):>6}  "
                   f"{split.generator_key}")
    typer.echo(f"wrote {len(split_file.splits)} splits ({split_file.info.get('candidates')} candidates) to {out}")


def cmd_oodml_run(
    recipe: Annotated[str, typer.Argument(help="Recipe to train on every split.")],
    splits: Annotated[str, typer.Option(help="Split file (JSON, or a published ooDML .pkl).")],
    seeds: Annotated[str, typer.Option(help="Comma-separated run seeds.")] = "0",
    out: Annotated[str, typer.Option(help="Sweep directory (rerun with the same one to continue).")]
    = "oodml-sweep",
    split_ids: Annotated[str | None, typer.Option(help="Only these split ids, comma-separated.")] = None,
    part: Annotated[str, typer.Option(help="zero_shot: train on each split's train classes; "
                                           "few_shot_base: on split_train, validating on split_val.")]
    = "zero_shot",
    set_: Annotated[list[str] | None, typer.Option("--set", "-s", help="Override of RECIPE for every run "
                                                                       "(repeatable); data.dataset.* keys go to "
                                                                       "the wrapped dataset.")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda (overrides run.device).")] = None,
    worker: Annotated[bool, typer.Option("--worker", help="Share the runs with other worker processes (the "
                                                          "journal file in --out, or --storage): each run once; "
                                                          "stop when none is left to take.")] = False,
    storage: Annotated[str | None, typer.Option(help="Database URL shared by workers on several machines "
                                                     "(postgresql://user:pw@host/db); needs the tune "
                                                     "extra.")] = None,
    study: Annotated[str | None, typer.Option(help="With --worker or --storage: the study's name in the storage, "
                                                   "so one database holds several sweeps (default: the name --out "
                                                   "records, else dmlplug-oodml).")] = None,
) -> None:
    """Train and evaluate RECIPE once per split and seed; finished runs are skipped on a rerun."""
    from dmlplug_builtins.oodml.sweep import run_sweep

    if worker or storage:  # the shared runs are a grid on the tune plugin's engine (docs/tune.md)
        import dmlplug
        from dmlplug_builtins.oodml.sweep import require_tune

        command = "dmlplug oodml run " + ("--worker" if worker else "--storage")
        require_tune(dmlplug.plugin_host().registry, command)  # the host running this command
        from dmlplug_builtins.tune.grid import require_engine

        require_engine(command, storage)

    report = run_sweep(recipe, splits, seeds=int_list(seeds, "--seeds"), sweep_dir=out,
                       overrides=list(set_ or []), device=device, part=part,
                       split_ids=int_list(split_ids, "--split-ids") if split_ids else None,
                       echo=typer.echo, storage=storage, worker=worker, study_name=study)
    typer.echo(f"sweep {out}: {len(report.ran)} run(s) trained, {len(report.skipped)} skipped (finished), "
               f"{len(report.restarted)} restarted; summarise with `dmlplug oodml summarize {out}`")


def cmd_oodml_summarize(
    sweep_dir: Annotated[str, typer.Argument(help="Directory written by `dmlplug oodml run`.")],
    metric: Annotated[list[str] | None, typer.Option("--metric", "-m",
                                                     help="Metric key (repeatable); default recall@1, map@1000, "
                                                          "map@1000_revisiting (those present).")] = None,
    reduce: Annotated[str, typer.Option(help="max: per-metric maximum over epochs (ooDML protocol); "
                                             "best: selected epoch; final: last epoch.")] = "max",
    plot: Annotated[bool, typer.Option(help="Write ags.png.")] = True,
    tensorboard: Annotated[bool, typer.Option(help="Write TensorBoard events under SWEEP_DIR/tb.")] = True,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Per-split mean ± std over seeds, AGS per metric, and the metric-vs-FID plot."""
    from dmlplug.errors import RecipeError
    from dmlplug_builtins.oodml.summary import summarize_sweep, write_outputs

    if reduce not in ("max", "best", "final"):
        raise RecipeError(f"--reduce must be max, best or final, got {reduce!r}", where="--reduce")
    summary = summarize_sweep(sweep_dir, metrics=metric or None, reduce=reduce)  # type: ignore[arg-type]
    files = write_outputs(summary, plot=plot, tensorboard=tensorboard)
    if json_output:
        typer.echo(json.dumps(summary.to_json(), indent=2))
        return
    typer.echo(f"ooDML sweep {sweep_dir} (mean ± std over seeds, {reduce} per run):")
    typer.echo(summary.table())
    typer.echo("wrote " + ", ".join(str(f) for f in files))


def cmd_fewshot(
    path: Annotated[str, typer.Argument(help="A run directory or a checkpoint (.pt) of one.")],
    shots: Annotated[str, typer.Option(help="Support images per class, comma-separated.")] = "2,5",
    episodes: Annotated[int, typer.Option(help="Episodes per shot count.")] = 10,
    iterations: Annotated[str | None, typer.Option(help="Adaptation iterations per shot count, e.g. "
                                                        "2=1000,5=1500 (default: those; other counts 1000).")]
    = None,
    lr: Annotated[float, typer.Option(help="Adam learning rate of the head.")] = 1e-4,
    batch_size: Annotated[int, typer.Option(help="Support images per adaptation batch.")] = 112,
    beta: Annotated[float, typer.Option(help="Fixed Margin-loss β.")] = 1.2,
    seed: Annotated[int, typer.Option(help="Seed of batches, miner and sampled episodes.")] = 0,
    split_file: Annotated[str | None, typer.Option(help="Split file with stored episodes (default: the "
                                                        "run's).")] = None,
    split_id: Annotated[int | None, typer.Option(help="Split id in --split-file (default: the run's).")] = None,
    checkpoint: Annotated[str, typer.Option(help="best or last (for a run directory).")] = "best",
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    out: Annotated[str | None, typer.Option(help="Report file (default: <run dir>/fewshot.json).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", "-s", help="Override the run's recipe, e.g. a moved "
                                                                       "data.dataset.root (repeatable).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Few-shot adaptation of a trained run's embedding head (ooDML protocol); the run is not modified."""
    from pydantic import ValidationError

    import dmlplug
    from dmlplug.devices import resolve_device
    from dmlplug.errors import RecipeError
    from dmlplug_builtins.oodml import FewShotSettings
    from dmlplug_builtins.oodml.fewshot import run_fewshot, stored_episodes

    settings_kwargs: dict[str, Any] = {"shots": int_list(shots, "--shots"), "episodes": episodes, "lr": lr,
                                       "batch_size": batch_size, "beta": beta, "seed": seed}
    parsed = _iterations(iterations)
    if parsed is not None:
        settings_kwargs["iterations"] = parsed
    try:
        settings = FewShotSettings(**settings_kwargs)
    except ValidationError as exc:
        raise RecipeError(f"invalid few-shot option: {exc.errors()[0]['msg']}",
                          where=".".join(map(str, exc.errors()[0]["loc"]))) from None
    resolved = resolve_device(device)
    loaded = dmlplug.load_run(path, checkpoint=checkpoint, device=resolved, overrides=list(set_ or []))
    recipe = loaded.recipe
    stored = stored_episodes(loaded.dataset, split_file, split_id)
    report = run_fewshot(loaded.model, loaded.dataset.test, loaded.test_transform, settings, episodes=stored,
                         device=resolved, eval_batch_size=recipe.data.eval_batch_size,
                         workers=recipe.data.workers, backend=recipe.evaluation.backend)
    report.info["checkpoint"] = str(loaded.checkpoint)
    target = Path(out) if out else (loaded.run_dir or loaded.checkpoint.parent) / "fewshot.json"
    report.save(target)
    if json_output:
        typer.echo(json.dumps({"report": str(target), **report.flat_metrics()}, indent=2))
    else:
        typer.echo(f"few-shot adaptation of {loaded.checkpoint} ({report.info['episodes_from']} episodes), "
                   "mean ± 95% CI over episodes:")
        typer.echo(report.table())
        typer.echo(f"report: {target}")

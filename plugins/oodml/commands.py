"""``dmlplug oodml splits | run | summarize`` and ``dmlplug fewshot``: ooDML and few-shot from the command line.

The work happens in :mod:`.features`, :mod:`.sweep`, :mod:`.summary` and :mod:`.fewshot`; they are
imported inside the commands so the CLI starts without torch. See ``docs/oodml.md`` and ``docs/fewshot.md``.
"""

from __future__ import annotations

from typing import Any


def int_list(text: str, option: str) -> list[int]:
    """``"2,5,10"`` -> ``[2, 5, 10]`` for a CLI option; a clear error for anything else."""
    from dmlplug.errors import RecipeError

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise RecipeError(f"{option} must be comma-separated integers, got {text!r}", where=option) from None
    if not values:
        raise RecipeError(f"{option} is empty", where=option)
    return values


def _dataset_params(items: list[str] | None) -> dict[str, Any]:
    """``dataset.key=value`` (or ``key=value``) strings -> parameters, values parsed as TOML like ``--set``."""
    import tomllib

    from dmlplug.errors import RecipeError

    params = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        name = key.strip().removeprefix("dataset.")
        if not sep or "." in name or not name:
            raise RecipeError(f"--set {item}: expected dataset.<parameter>=value", where="--set",
                              fix="e.g. --set dataset.num_classes=100")
        try:
            params[name] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            params[name] = text  # bare strings need no quotes on the command line
    return params


def add_commands(app: Any) -> None:
    """Add the ``oodml`` command group and ``fewshot`` to the ``dmlplug`` typer app."""
    import typer

    oodml = typer.Typer(help="ooDML benchmark: generate splits, sweep a recipe over them, summarise with AGS.",
                        no_args_is_help=True)

    @oodml.command("splits")
    def splits_command(
        dataset: str = typer.Option(..., help="Registered dataset name (`dmlplug list datasets`)."),
        set_: list[str] = typer.Option(None, "--set", help="dataset.param=value (repeatable)."),
        out: str = typer.Option(..., help="Split file to write (JSON)."),
        num_splits: int = typer.Option(8, help="Number of splits, spread evenly over the FID range."),
        backbone: str = typer.Option("resnet50", help="timm model of the feature extractor."),
        weights: str = typer.Option(None, help="Local weights file of the extractor (random weights without; "
                                               "a warning says so)."),
        extractor_run: str = typer.Option(None, help="A dmlplug run (directory or checkpoint) whose trained "
                                                     "backbone and test transform extract the features, instead "
                                                     "of --backbone/--weights/--image-size."),
        image_size: int = typer.Option(224, help="Input size of the extractor."),
        batch_size: int = typer.Option(64, help="Images per forward pass."),
        swaps_per_iter: int = typer.Option(2, help="Classes exchanged per swapping iteration (SOP: 1000)."),
        iterations: int = typer.Option(25, help="Swapping iterations."),
        history: int = typer.Option(5, help="Recently swapped slots that may not be swapped again."),
        inverse_iterations: int = typer.Option(0, help="Iterations of the inverse run (easier splits); 0: none."),
        removal: bool = typer.Option(True, help="Continue with class removal after swapping."),
        min_remaining: float = typer.Option(0.5, help="Fraction of each side's images removal keeps."),
        shots: str = typer.Option("2,5,10", help="Few-shot support sizes stored in the file."),
        episodes: int = typer.Option(10, help="Episodes per support size."),
        seed: int = typer.Option(0, help="Seed of validation partitions and episodes."),
        device: str = typer.Option("auto", help="auto, cpu or cuda."),
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

    @oodml.command("run")
    def run_command(
        recipe: str = typer.Argument(..., help="Recipe to train on every split."),
        splits: str = typer.Option(..., help="Split file (JSON, or a published ooDML .pkl)."),
        seeds: str = typer.Option("0", help="Comma-separated run seeds."),
        out: str = typer.Option("oodml-sweep", help="Sweep directory (rerun with the same one to continue)."),
        split_ids: str = typer.Option(None, help="Only these split ids, comma-separated."),
        part: str = typer.Option("zero_shot", help="zero_shot: train on each split's train classes; "
                                                   "few_shot_base: on split_train, validating on split_val."),
        set_: list[str] = typer.Option(None, "--set", "-s", help="Override of RECIPE for every run (repeatable); "
                                                                 "data.dataset.* keys go to the wrapped dataset."),
        device: str = typer.Option(None, help="auto, cpu or cuda (overrides run.device)."),
    ) -> None:
        """Train and evaluate RECIPE once per split and seed; finished runs are skipped on a rerun."""
        from dmlplug_builtins.oodml.sweep import run_sweep

        report = run_sweep(recipe, splits, seeds=int_list(seeds, "--seeds"), sweep_dir=out,
                           overrides=list(set_ or []), device=device, part=part,
                           split_ids=int_list(split_ids, "--split-ids") if split_ids else None,
                           echo=typer.echo)
        typer.echo(f"sweep {out}: {len(report.ran)} run(s) trained, {len(report.skipped)} skipped (finished), "
                   f"{len(report.restarted)} restarted; summarise with `dmlplug oodml summarize {out}`")

    @oodml.command("summarize")
    def summarize_command(
        sweep_dir: str = typer.Argument(..., help="Directory written by `dmlplug oodml run`."),
        metric: list[str] = typer.Option(None, "--metric", "-m",
                                         help="Metric key (repeatable); default recall@1, map@1000, "
                                              "map@1000_revisiting (those present)."),
        reduce: str = typer.Option("max", help="max: per-metric maximum over epochs (ooDML protocol); "
                                               "best: selected epoch; final: last epoch."),
        plot: bool = typer.Option(True, help="Write ags.png."),
        tensorboard: bool = typer.Option(True, help="Write TensorBoard events under SWEEP_DIR/tb."),
        json_output: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    ) -> None:
        """Per-split mean ± std over seeds, AGS per metric, and the metric-vs-FID plot."""
        import json

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

    app.add_typer(oodml, name="oodml")
    _add_fewshot(app)


def _iterations(text: str | None) -> dict[int, int] | None:
    """``"2=1000,5=1500"`` -> ``{2: 1000, 5: 1500}`` for ``--iterations``."""
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


def _add_fewshot(app: Any) -> None:
    import typer

    @app.command("fewshot")
    def fewshot_command(
        path: str = typer.Argument(..., help="A run directory or a checkpoint (.pt) of one."),
        shots: str = typer.Option("2,5", help="Support images per class, comma-separated."),
        episodes: int = typer.Option(10, help="Episodes per shot count."),
        iterations: str = typer.Option(None, help="Adaptation iterations per shot count, e.g. 2=1000,5=1500 "
                                                  "(default: those; other counts 1000)."),
        lr: float = typer.Option(1e-4, help="Adam learning rate of the head."),
        batch_size: int = typer.Option(112, help="Support images per adaptation batch."),
        beta: float = typer.Option(1.2, help="Fixed Margin-loss β."),
        seed: int = typer.Option(0, help="Seed of batches, miner and sampled episodes."),
        split_file: str = typer.Option(None, help="Split file with stored episodes (default: the run's)."),
        split_id: int = typer.Option(None, help="Split id in --split-file (default: the run's)."),
        checkpoint: str = typer.Option("best", help="best or last (for a run directory)."),
        device: str = typer.Option("auto", help="auto, cpu or cuda."),
        out: str = typer.Option(None, help="Report file (default: <run dir>/fewshot.json)."),
        set_: list[str] = typer.Option(None, "--set", "-s", help="Override the run's recipe, e.g. a moved "
                                                                 "data.dataset.root (repeatable)."),
        json_output: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    ) -> None:
        """Few-shot adaptation of a trained run's embedding head (ooDML protocol); the run is not modified."""
        import json
        from pathlib import Path

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

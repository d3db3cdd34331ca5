"""The built-in loggers: console, TensorBoard, record-keeper, MLflow, W&B (per-run plugins with lifecycle hooks).

This module holds their parameters, factories and registration and stays torch-free at import; the
implementations live beside it (:mod:`.console`, :mod:`.tensorboard_logger`, :mod:`.record_keeper_logger`,
:mod:`.mlflow_logger`, :mod:`.wandb_logger`) and are imported by the factories. Every logger reads the run
only through the :class:`dmlplug.protocols.RunView` its hooks receive. TensorBoard tags are a public interface
(docs/monitoring.md): add tags, never rename them. ``on_bundle_exported`` logs a bundle of a run the mlflow logger
tracked as an MLflow model (``dmlplug export --log-model``, :mod:`.mlflow_model`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from dmlplug import Params, hookimpl
from dmlplug.protocols import Register


def require_package(module: str, logger: str, distribution: str, install: str | None = None) -> None:
    """Fail recipe validation when a logger's package is not importable (never fail silently at run time).

    Args:
        module: The module to find.
        logger: The logger's registered name.
        distribution: The distribution providing ``module``.
        install: What to ``pip install`` (default: ``distribution``), e.g. an extra ``"dmlplug[mlflow]"``.

    Raises:
        ValueError: Turned by pydantic into a validation error of the logger's table.
    """
    if importlib.util.find_spec(module) is None:
        raise ValueError(
            f"logger {logger!r} needs the {distribution!r} package, which is not installed "
            f"(fix: pip install {install or distribution}, or remove this [[loggers]] table)")


class ConsoleParams(Params):
    """Parameters of the ``console`` logger."""

    progress: bool = Field(True, description="Show a progress bar when attached to a terminal.")


class TensorBoardParams(Params):
    """Parameters of the ``tensorboard`` logger."""

    subdir: str = Field("tb", description="Folder of the event files inside the run directory.")
    histograms: bool = Field(True, description="Histograms of positive and negative pair distances at every "
                                               "evaluation (eval/<split>/pair_distance/positive|negative).")
    histogram_pairs: int = Field(20_000, ge=10, description="Positive and negative pairs sampled (seeded) for "
                                                            "each histogram; bounds time and memory.")
    figures: bool = Field(True, description="Evaluator figures (e.g. OPIS utility curves) as images at every "
                                            "evaluation (eval/<split>/figure/<name>).")
    projector: bool = Field(True, description="At the end of the run, a sample of the last evaluated embeddings "
                                              "with labels and thumbnails for TensorBoard's projector.")
    projector_samples: int = Field(500, ge=1, description="Embeddings in the projector sample.")
    thumbnail_size: int = Field(32, ge=8, le=128, description="Side of the projector thumbnails in pixels.")
    hparams: bool = Field(True, description="At the end of a completed run, the flattened recipe values with the "
                                            "final and best metrics (TensorBoard's HParams tab).")

    @model_validator(mode="after")
    def _tensorboard_installed(self) -> TensorBoardParams:
        require_package("tensorboard", "tensorboard", "tensorboard")
        return self


class RecordKeeperParams(Params):
    """Parameters of the ``record_keeper`` logger."""

    subdir: str = Field("record_keeper", description="Folder of the CSV files and logs.db inside the run directory.")
    every: int | None = Field(None, ge=1, description="Record every N optimizer steps (default: run.log_every).")
    tensorboard: bool = Field(True, description="Also write the records as TensorBoard scalars "
                                                "train/pml/<group>/<series>.")
    tensorboard_subdir: str = Field("tb", description="Folder of the TensorBoard event files.")

    @model_validator(mode="after")
    def _packages_installed(self) -> RecordKeeperParams:
        require_package("record_keeper", "record_keeper", "record-keeper")
        if self.tensorboard:
            require_package("tensorboard", "record_keeper", "tensorboard")
        return self


class MLflowParams(Params):
    """Parameters of the ``mlflow`` logger."""

    tracking_uri: str | None = Field(None, description="MLflow tracking URI (http://host:5000, sqlite:///mlflow.db, "
                                                        "a folder); default: MLflow's own (MLFLOW_TRACKING_URI, else "
                                                        "sqlite:///mlflow.db, or ./mlruns where it exists; local "
                                                        "stores need the full mlflow package, not mlflow-skinny).")
    experiment: str | None = Field(None, description="MLflow experiment, created when missing (default: the run "
                                                     "name, [run] name).")
    run_name: str | None = Field(None, description="Name of the MLflow run (default: the run directory's name).")
    figures: bool = Field(True, description="Evaluator figures (e.g. OPIS utility curves) as PNG artifacts "
                                            "figures/<split>/<name>_step_<NNNNNN>.png at every evaluation.")
    pictures: bool = Field(True, description="The retrieval pictures of every evaluation as artifacts "
                                             "pictures/<split>/epoch_<NNN>_<kind>.png.")

    @model_validator(mode="after")
    def _mlflow_installed(self) -> MLflowParams:
        require_package("mlflow", "mlflow", "mlflow-skinny", install='"dmlplug[mlflow]"')
        return self


class WandbParams(Params):
    """Parameters of the ``wandb`` logger."""

    project: str | None = Field(None, description="W&B project (default: WANDB_PROJECT, else the run name, [run] "
                                                  "name).")
    entity: str | None = Field(None, description="W&B entity, a user or team (default: WANDB_ENTITY, else your "
                                                 "default entity).")
    mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="online: stream to the W&B server (needs `wandb login`); offline: write locally, upload "
                          "later with `wandb sync`; disabled: log nothing. Default: WANDB_MODE, else online.")
    run_name: str | None = Field(None, description="Display name of the W&B run (default: the run directory's name).")
    group: str | None = Field(None, description="W&B group of the run (default: WANDB_RUN_GROUP, else none).")
    tags: list[str] | None = Field(None, description="W&B tags of the run (default: WANDB_TAGS, else none).")
    notes: str | None = Field(None, description="W&B notes of the run (default: WANDB_NOTES, else none).")
    job_type: str | None = Field(None, description="W&B job type of the run (default: WANDB_JOB_TYPE, else none).")
    dir: str | None = Field(None, description="Folder in which W&B writes its wandb/ folder (default: WANDB_DIR, "
                                              "else the run directory).")
    resume: Literal["allow", "must"] = Field("allow", description="How a resumed dmlplug run reopens its W&B run "
                                                                  "(<run>/wandb.json): allow creates it when the "
                                                                  "server does not have it, must fails then.")
    figures: bool = Field(True, description="Evaluator figures (e.g. OPIS utility curves) as images "
                                            "eval/<split>/figure/<name> at every evaluation.")
    pictures: bool = Field(True, description="The retrieval pictures of every evaluation as images "
                                             "eval/<split>/pictures/<kind>.")

    @model_validator(mode="after")
    def _wandb_installed(self) -> WandbParams:
        require_package("wandb", "wandb", "wandb", install='"dmlplug[wandb]"')
        return self


def build_console(params: ConsoleParams, ctx):
    """Console logger: a progress bar per epoch (unless ``dmlplug run --quiet``) and one line per evaluation."""
    from dmlplug_builtins.loggers.console import ConsoleLogger

    return ConsoleLogger(params, quiet=bool(ctx.quiet))


def build_tensorboard(params: TensorBoardParams, ctx):
    """TensorBoard logger (event files in <run>/<subdir>); the package was checked at validation."""
    from dmlplug_builtins.loggers.tensorboard_logger import TensorBoardLogger

    return TensorBoardLogger(params)


def build_record_keeper(params: RecordKeeperParams, ctx):
    """record-keeper logger (CSV + SQLite in <run>/record_keeper, TensorBoard train/pml/*).

    It keeps ``ctx`` to build second instances of the run's loss, miner and regularizers (``ctx.rebuild``),
    from which it learns the statistics PML can record.
    """
    from dmlplug_builtins.loggers.record_keeper_logger import RecordKeeperLogger

    return RecordKeeperLogger(params, rebuild=ctx.rebuild)


def build_mlflow(params: MLflowParams, ctx):
    """MLflow logger (a tracked run per dmlplug run, its id in <run>/mlflow.json); the package was checked.

    An ``http(s)`` tracking server is asked once, here, whether it is up: the run fails within seconds, before its
    directory is written, instead of after minutes of the client's retries (:mod:`.mlflow_server`).
    """
    from dmlplug_builtins.loggers.mlflow_logger import MLflowLogger
    from dmlplug_builtins.loggers.mlflow_server import require_tracking_server

    require_tracking_server(params.tracking_uri)
    return MLflowLogger(params, quiet=bool(ctx.quiet))


def build_wandb(params: WandbParams, ctx):
    """W&B logger (a W&B run per dmlplug run, its id in <run>/wandb.json); the package was checked."""
    from dmlplug_builtins.loggers.wandb_logger import WandbLogger

    return WandbLogger(params, quiet=bool(ctx.quiet))


@hookimpl
def on_bundle_exported(bundle: Path, manifest: Mapping[str, Any], run_dir: Path | None, log_model: bool) -> str | None:
    """Log the bundle as a model of the run's MLflow run (``dmlplug export --log-model``, :mod:`.mlflow_model`).

    Only for a run the mlflow logger tracked (it wrote ``mlflow.json``, ``mlflow_logger.STATE_FILE``, not imported
    here: plugins load without MLflow); nothing without ``--log-model`` or for any other run.
    """
    if not log_model or run_dir is None or not (run_dir / "mlflow.json").is_file():
        return None
    from dmlplug_builtins.loggers.mlflow_model import log_bundle

    return log_bundle(bundle, manifest, run_dir)


@hookimpl
def register_loggers(register: Register) -> None:
    """Register the console, TensorBoard, record-keeper, MLflow and W&B loggers."""
    register("console", build_console, params=ConsoleParams, description="Progress bar and metric lines.")
    register("tensorboard", build_tensorboard, params=TensorBoardParams,
             description="TensorBoard: losses, learning rates, metrics, pair-distance histograms, evaluator figures, "
                         "embedding projector, hyper-parameters (docs/monitoring.md).")
    register("record_keeper", build_record_keeper, params=RecordKeeperParams,
             description="PML's recordable statistics (e.g. mined pairs) and metrics through record-keeper: "
                         "CSV, SQLite and TensorBoard train/pml/*.")
    register("mlflow", build_mlflow, params=MLflowParams,
             description="MLflow: recipe as parameters, losses and metrics at the global step, figures and retrieval "
                         "pictures as artifacts; a resume continues the same MLflow run (docs/monitoring.md).")
    register("wandb", build_wandb, params=WandbParams,
             description="Weights & Biases: recipe as config, losses and metrics on the global step, figures and "
                         "retrieval pictures as images; a resume continues the same W&B run (docs/monitoring.md).")

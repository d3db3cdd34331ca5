"""Out-of-distribution DML benchmark (ooDML): Fréchet distance, split generation, split files, AGS.

Pure numpy/scipy: importing this package does not import torch. Feature extraction, sweeps and the
few-shot protocol build on these functions and are imported explicitly (they use torch inside):
``dmlplug.oodml.features`` (split generation from a dataset), ``dmlplug.oodml.sweep`` and
``dmlplug.oodml.summary`` (``dmlplug oodml run | summarize``), ``dmlplug.oodml.fewshot`` (few-shot
adaptation). See ``docs/oodml.md`` and ``docs/fewshot.md``.
"""

from dmlplug.oodml.ags import ags, normalized_fids
from dmlplug.oodml.assemble import build_split_file
from dmlplug.oodml.episodes import partition_train_val, sample_episodes
from dmlplug.oodml.fewshot_stats import mean_confidence_interval
from dmlplug.oodml.frechet import frechet_distance, frechet_distance_from_moments, trace_sqrt_product
from dmlplug.oodml.selection import select_evenly
from dmlplug.oodml.splitfile import OodSplit, SplitFile, load_published_pickle, load_splits, save_splits
from dmlplug.oodml.swapping import (
    SplitCandidate,
    class_means,
    generate_candidates,
    remove_classes,
    swap_classes,
)

__all__ = [
    "OodSplit",
    "SplitCandidate",
    "SplitFile",
    "ags",
    "build_split_file",
    "class_means",
    "frechet_distance",
    "frechet_distance_from_moments",
    "generate_candidates",
    "load_published_pickle",
    "load_splits",
    "mean_confidence_interval",
    "normalized_fids",
    "partition_train_val",
    "remove_classes",
    "sample_episodes",
    "save_splits",
    "select_evenly",
    "swap_classes",
    "trace_sqrt_product",
]

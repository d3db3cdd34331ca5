"""Contract checks for components, for plugin authors' CI (the built-ins pass the same checks).

A plugin's whole test suite can be one line::

    from dmlplug.testing import check_plugin

    def test_contracts():
        check_plugin("my_plugin")          # the module (or its import name) that holds the hookimpls

or, component by component::

    from dmlplug.testing import check_loss, load_host

    def test_my_loss():
        check_loss("my_loss", host=load_host("my_plugin"))

Every check builds the component from its registered ``Params`` defaults (or ``params=``) on a tiny,
seeded context: 8 classes of 4 samples (a batch of 32), 16-d embeddings, 24-d features, 3×8×8 images.
A failed check raises :class:`ContractError` (an ``AssertionError``, so pytest shows it as a failure)
whose message names the component and the broken rule. Every build is checked against the kind's Protocol,
and what the component's ``Params`` declare to ``dmlplug validate`` is compared with what it does: metric
names (evaluators), head outputs (heads), optimizer groups (losses, regularizers, heads), tags (losses, miners).
Requirements (``requires=``) the checks know how to satisfy: ``loss:<tag>`` (the first registered loss offering
the tag, or ``loss=`` a table), ``features``, ``feature_map``, ``views:N``, ``ema``, ``named_embeddings``
(pass ``head=`` with a head that declares outputs), ``dataset:super_labels``, ``sampler:*`` (the batch has
equal class counts). Anything else is reported, never skipped.

The kit is split by component kind: :mod:`.fixtures` (sizes, host, context, :func:`build`), :mod:`.losses`
(losses and miners), :mod:`.regularizers` (with :func:`make_step`), :mod:`.samplers`, :mod:`.evaluators`,
:mod:`.heads`, :mod:`.loggers`, :mod:`.datasets`, :mod:`.geometry` (distances and reducers),
:mod:`.training` (optimizers, LR schedules, augmentation policies), :mod:`.retrieval` (re-rankers),
:mod:`.tuning` (tune samplers and pruners), :mod:`.codecs` (index codecs) and :mod:`.plugin` (:func:`check_component`,
:func:`check_plugin`); every public name is importable from ``dmlplug.testing`` itself. Importing it does not
import torch; the checks do.
"""

from __future__ import annotations

from dmlplug.testing.codecs import check_index_codec
from dmlplug.testing.datasets import check_dataset
from dmlplug.testing.evaluators import check_evaluator
from dmlplug.testing.fixtures import (
    BATCH,
    EMBEDDING_SIZE,
    FEATURE_DIM,
    IMAGE_SIZE,
    NUM_CLASSES,
    PER_CLASS,
    ContractError,
    batch_labels,
    build,
    load_host,
    make_context,
    tagged_table,
)
from dmlplug.testing.geometry import check_distance, check_reducer
from dmlplug.testing.heads import check_head
from dmlplug.testing.loggers import check_logger
from dmlplug.testing.losses import check_loss, check_miner
from dmlplug.testing.plugin import check_component, check_plugin
from dmlplug.testing.regularizers import STEP_REQUIREMENTS, check_regularizer, make_step
from dmlplug.testing.retrieval import check_reranker
from dmlplug.testing.samplers import check_sampler, sampler_context, uneven_labels
from dmlplug.testing.training import check_augmentation, check_lr_schedule, check_optimizer
from dmlplug.testing.tuning import check_tune_pruner, check_tune_sampler

__all__ = [
    "BATCH", "EMBEDDING_SIZE", "FEATURE_DIM", "IMAGE_SIZE", "NUM_CLASSES", "PER_CLASS", "STEP_REQUIREMENTS",
    "ContractError", "batch_labels", "build", "check_augmentation", "check_component", "check_dataset",
    "check_distance", "check_evaluator", "check_head", "check_index_codec", "check_logger", "check_loss",
    "check_lr_schedule", "check_miner",
    "check_optimizer", "check_plugin", "check_reducer", "check_regularizer", "check_reranker", "check_sampler",
    "check_tune_pruner", "check_tune_sampler", "load_host",
    "make_context", "make_step", "sampler_context", "tagged_table", "uneven_labels",
]

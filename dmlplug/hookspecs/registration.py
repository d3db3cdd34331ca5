"""The registration hooks: one ``register_<kind>`` per component kind, each given the ``register`` callback.

See :mod:`dmlplug.hookspecs` for the callback's arguments and what a factory may do.
"""

from __future__ import annotations

import pluggy

from dmlplug.protocols import Register

#: The marker that declares a hook of the ``dmlplug`` project.
hookspec = pluggy.HookspecMarker("dmlplug")


@hookspec
def register_backbones(register: Register) -> None:
    """Register backbones (images -> pooled features and feature map).

    Called once when the plugin manager is built. The factory returns a ``torch.nn.Module`` whose
    ``forward(images)`` returns ``(features, feature_map)`` (``B×F`` and ``B×F×h×w``, the map may be
    ``None``) and which has an integer attribute ``num_features`` (F).

    Example::

        @hookimpl
        def register_backbones(register):
            register("tiny_cnn", build_tiny_cnn, params=TinyCnnParams, description="Four conv layers.")
    """


@hookspec
def register_heads(register: Register) -> None:
    """Register embedding heads (pooled features -> embedding).

    The factory gets ``ctx.feature_dim`` and returns a ``torch.nn.Module`` with ``forward(features)``
    returning a ``B×D`` tensor, or a dict of named embeddings together with an
    ``eval_embedding(outputs)`` method; it has an integer attribute ``embedding_size`` (the size of the
    evaluation embedding).

    Example::

        @hookimpl
        def register_heads(register):
            register("linear", build_linear_head, params=LinearHeadParams)
    """


@hookspec
def register_losses(register: Register) -> None:
    """Register metric-learning losses.

    The factory returns a module called as ``loss(embeddings, labels, indices_tuple)`` (the
    pytorch-metric-learning convention). ``ctx.num_classes`` and ``ctx.embedding_size`` are set.

    Example::

        @hookimpl
        def register_losses(register):
            register("my_contrastive", build_my_contrastive, params=MyContrastiveParams)
    """


@hookspec
def register_miners(register: Register) -> None:
    """Register tuple miners.

    The factory returns a module called as ``miner(embeddings, labels)`` that returns an index tuple
    (pairs ``(a1, p, a2, n)`` or triplets ``(a, p, n)``) as in pytorch-metric-learning.

    Example::

        @hookimpl
        def register_miners(register):
            register("hardest", build_hardest_miner, params=HardestParams)
    """


@hookspec
def register_regularizers(register: Register) -> None:
    """Register regularizers: extra loss terms computed from the whole training step.

    The factory returns a ``torch.nn.Module`` whose ``forward(step)`` takes a
    :class:`dmlplug.step.StepOutput` and returns a scalar tensor or a dict of named scalar
    tensors. The engine adds ``weight * term`` to the loss and logs every term by name.

    Example::

        @hookimpl
        def register_regularizers(register):
            register("tcm", build_tcm, params=TcmParams, description="Threshold-consistent margin.")
    """


@hookspec
def register_evaluators(register: Register) -> None:
    """Register evaluators (embeddings and labels -> named metrics).

    The factory returns an object with ``evaluate(eval_ctx) -> dict[str, float]`` where ``eval_ctx`` is a
    :class:`dmlplug.evaluation.EvalContext` that computes the kNN graph once for all evaluators.

    Example::

        @hookimpl
        def register_evaluators(register):
            register("recall", build_recall, params=RecallParams)
    """


@hookspec
def register_datasets(register: Register) -> None:
    """Register datasets.

    The factory returns a :class:`dmlplug.data.DatasetBundle` (train, test and optional validation
    :class:`dmlplug.data.ImageSource` objects). It must never download anything: a missing root is a
    :class:`dmlplug.errors.DataError` that names the expected layout.

    Example::

        @hookimpl
        def register_datasets(register):
            register("my_folder_set", build_my_set, params=MySetParams)
    """


@hookspec
def register_samplers(register: Register) -> None:
    """Register batch samplers.

    The factory gets ``ctx.train_labels`` (int64 numpy array) and ``ctx.batch_size`` and returns an
    iterable of index lists (a ``torch.utils.data.Sampler`` yielding batches) with a defined ``len``.

    Example::

        @hookimpl
        def register_samplers(register):
            register("m_per_class", build_m_per_class, params=MPerClassParams)
    """


@hookspec
def register_loggers(register: Register) -> None:
    """Register loggers.

    The factory returns an object implementing any of the lifecycle hooks below (with
    ``@hookimpl``); it is registered with the plugin manager for one run only and unregistered when the
    run ends, so an installed but unused logger hears nothing.

    Example::

        @hookimpl
        def register_loggers(register):
            register("jsonl_echo", build_echo_logger)
    """


@hookspec
def register_distances(register: Register) -> None:
    """Register distances, used as nested tables of losses and miners (``[loss.distance] name = "..."``).

    The factory returns a ``pytorch_metric_learning.distances.BaseDistance`` subclass instance
    (:class:`dmlplug.protocols.Distance`), so every PML loss and miner accepts it.

    Example::

        @hookimpl
        def register_distances(register):
            register("manhattan", build_manhattan, params=ManhattanParams)
    """


@hookspec
def register_reducers(register: Register) -> None:
    """Register reducers, nested in losses (``[loss.reducer] name = "..."``).

    The factory returns a ``pytorch_metric_learning.reducers.BaseReducer`` subclass instance
    (:class:`dmlplug.protocols.Reducer`).

    Example::

        @hookimpl
        def register_reducers(register):
            register("top_k_mean", build_top_k_mean, params=TopKMeanParams)
    """


@hookspec
def register_optimizers(register: Register) -> None:
    """Register optimizers (``[optimizer] name = "..."``).

    The factory gets the named parameter groups in ``ctx.require("param_groups")`` (learning rates and
    weight decays of ``[optimizer]`` and ``[optimizer.groups.<name>]`` applied) and returns a
    ``torch.optim.Optimizer`` over them (:class:`dmlplug.protocols.Optimizer`); its Params hold only the
    optimizer's own settings (betas, momentum …).

    Example::

        @hookimpl
        def register_optimizers(register):
            register("lion", build_lion, params=LionParams)
    """


@hookspec
def register_lr_schedules(register: Register) -> None:
    """Register learning-rate schedules (``[scheduler] name = "..."``).

    The factory gets the built optimizer in ``ctx.require("optimizer")`` and ``ctx.epochs``, and returns an
    object the engine steps once per epoch with the epoch's selection metric
    (:class:`dmlplug.protocols.LRSchedule`: ``step_epoch(metric)``, ``state_dict()``, ``load_state_dict()``).

    Example::

        @hookimpl
        def register_lr_schedules(register):
            register("linear_decay", build_linear_decay, params=LinearDecayParams)
    """


@hookspec
def register_augmentations(register: Register) -> None:
    """Register training augmentation policies (``[data] augment = "..."``).

    The factory gets ``ctx.require("image_size")`` and returns a transform: PIL image -> normalised
    ``3×S×S`` float tensor (:class:`dmlplug.protocols.Augmentation`). Evaluation's resize and centre crop
    stay the engine's, so every policy is evaluated the same way.

    Example::

        @hookimpl
        def register_augmentations(register):
            register("randaugment", build_randaugment, params=RandAugmentParams)
    """


@hookspec
def register_rerankers(register: Register) -> None:
    """Register re-ranking methods (``[evaluation] rerank = ["aqe"]``, ``dmlplug search --rerank aqe:n=3``).

    The factory returns an object with ``rerank(problem, k)`` (:class:`dmlplug.protocols.Reranker`): from a
    :class:`dmlplug.protocols.RerankProblem` (unit queries and gallery, the caller's searches) it returns every
    query's re-ranked ``k`` gallery rows. The same component re-ranks evaluations and index searches.

    Example::

        @hookimpl
        def register_rerankers(register):
            register("mutual", build_mutual_reranker, params=MutualParams)
    """


@hookspec
def register_index_codecs(register: Register) -> None:
    """Register index codecs (``dmlplug index --codec NAME``): how a gallery's vectors are stored and searched.

    The factory returns a :class:`dmlplug.protocols.IndexCodec`: it plans the index's parameters from the
    gallery's size (those the Params give win), makes the empty faiss-like index, says how many vectors train it
    and how many bytes a vector takes at least, and saves and loads it.

    Example::

        @hookimpl
        def register_index_codecs(register):
            register("opq", build_opq_codec, params=OpqParams)
    """


@hookspec
def register_tune_samplers(register: Register) -> None:
    """Register Optuna samplers for ``dmlplug tune`` and ``dmlplug sweep`` (``[tune] sampler = "tpe"``).

    The factory reads ``ctx.seed`` (``[tune] sampler_seed``; ``None``: fresh randomness) and, if it needs the
    searched keys, ``ctx.require("search_space")`` (key -> Optuna distribution), and returns an
    ``optuna.samplers.BaseSampler`` (:class:`dmlplug.protocols.TuneSampler`).

    Example::

        @hookimpl
        def register_tune_samplers(register):
            register("gp", build_gp_sampler, params=GpParams)
    """


@hookspec
def register_tune_pruners(register: Register) -> None:
    """Register Optuna pruners for ``dmlplug tune`` (``[tune] pruner = "median"``).

    The factory returns an ``optuna.pruners.BasePruner`` (:class:`dmlplug.protocols.TunePruner`); a trial reports
    the running mean of its folds after every validated epoch (steps counted from 1), or after every fold with
    ``[tune] prune_at = "fold"``.

    Example::

        @hookimpl
        def register_tune_pruners(register):
            register("hyperband", build_hyperband, params=HyperbandParams)
    """

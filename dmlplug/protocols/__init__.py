"""What the engine may call on each kind of component, and what hooks receive (public API).

Every component kind has a :class:`typing.Protocol` listing its required members
(:mod:`dmlplug.protocols.components`); the optional *engine services* a component may offer are separate small
protocols (:class:`HasOptimizerParamGroups`, :class:`HasAfterOptimizerStep` …, in
:mod:`dmlplug.protocols.services`, with :class:`RunView` and :class:`ReportSection`). Import them from this
package: together they are the whole contract between plugins and engine. The engine checks them with
``isinstance`` (they are ``runtime_checkable``). Nothing here imports torch: tensors and modules are typed ``Any``.
"""

from __future__ import annotations

from dmlplug.protocols.components import (
    Augmentation,
    Backbone,
    BatchSampler,
    Dataset,
    Distance,
    Evaluator,
    Factory,
    Head,
    ImageSplit,
    Logger,
    Loss,
    LRSchedule,
    Miner,
    MultiHead,
    Optimizer,
    P,
    P_contra,
    Reducer,
    Register,
    Regularizer,
)
from dmlplug.protocols.kinds import KIND_PROTOCOLS, KIND_TABLE, KINDS, Kind
from dmlplug.protocols.retrieval import IndexCodec, Reranker, RerankProblem
from dmlplug.protocols.services import (
    HasAfterOptimizerStep,
    HasEmaMomentum,
    HasEvalCrop,
    HasFigures,
    HasOptimizerParamGroups,
    HasRandomSources,
    HasRequiredK,
    HasSetEpoch,
    HasTensorInput,
    HasViewAugment,
    ReportSection,
    RunView,
    WritesArtifacts,
)
from dmlplug.protocols.tuning import TunePruner, TuneSampler

__all__ = [
    "P_contra",
    "P",
    "Factory",
    "Register",
    "Backbone",
    "Head",
    "MultiHead",
    "Loss",
    "Miner",
    "Regularizer",
    "Evaluator",
    "BatchSampler",
    "Dataset",
    "ImageSplit",
    "Logger",
    "Distance",
    "Reducer",
    "Optimizer",
    "LRSchedule",
    "Augmentation",
    "Reranker",
    "RerankProblem",
    "IndexCodec",
    "TuneSampler",
    "TunePruner",
    "Kind",
    "KIND_TABLE",
    "KINDS",
    "KIND_PROTOCOLS",
    "HasOptimizerParamGroups",
    "HasAfterOptimizerStep",
    "HasSetEpoch",
    "HasEvalCrop",
    "HasViewAugment",
    "HasRandomSources",
    "HasTensorInput",
    "HasEmaMomentum",
    "HasRequiredK",
    "HasFigures",
    "WritesArtifacts",
    "RunView",
    "ReportSection",
]

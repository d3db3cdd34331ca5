"""Contract check of heads."""

from __future__ import annotations

from typing import Any

from dmlplug.plugins import PluginHost
from dmlplug.testing.fixtures import (
    BATCH,
    FEATURE_DIM,
    Declared,
    build,
    expect,
    expect_groups_declared,
    load_host,
    make_context,
)


def check_head(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A head maps ``B×F`` features to ``B×embedding_size`` (or named embeddings with ``eval_embedding``).

    The named embeddings must be exactly the declared ``Params.head_outputs()``, in order (``()``: one tensor),
    and the optimizer groups the declared ``Params.optimizer_group_names("head")``.
    """
    import torch

    host = host or load_host()
    info = Declared(host, "heads", name, params)
    torch.manual_seed(0)
    head = build("heads", name, make_context(host), **(params or {}))
    features = torch.randn(BATCH, FEATURE_DIM, requires_grad=True)
    out = head(features)
    declared = tuple(info.params.head_outputs())
    returned = tuple(out) if isinstance(out, dict) else ()
    expect(returned == declared, f"head {name!r}: returns named embeddings {list(returned)}, but Params.head_outputs() "
                                 f"declares {list(declared)}")
    expect_groups_declared(f"head {name!r}", head, info.params, "head")
    if isinstance(out, dict):
        expect(callable(getattr(head, "eval_embedding", None)), f"head {name!r}: named output needs eval_embedding")
        out = head.eval_embedding(out)
    expect(tuple(out.shape) == (BATCH, int(head.embedding_size)),
           f"head {name!r}: output {tuple(out.shape)}, embedding_size {head.embedding_size}")
    out.sum().backward()
    expect(features.grad is not None and bool(torch.isfinite(features.grad).all()),
           f"head {name!r}: no finite gradient to the features")

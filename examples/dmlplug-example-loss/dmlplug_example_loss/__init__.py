"""An example dmlplug plugin: a cosine contrastive loss registered through the public hooks."""

from __future__ import annotations

from pydantic import Field

from dmlplug import Params, hookimpl


class CosineContrastiveParams(Params):
    """Parameters of ``example_cosine_contrastive``."""

    pos_margin: float = Field(0.9, ge=-1, le=1, description="Positive pairs are pulled above this cosine.")
    neg_margin: float = Field(0.4, ge=-1, le=1, description="Negative pairs are pushed below this cosine.")


def build_cosine_contrastive(params: CosineContrastiveParams, ctx):
    """Mean hinge on cosine similarities of all positive and negative pairs of the batch."""
    import torch
    from torch import nn

    class CosineContrastive(nn.Module):
        def forward(self, embeddings, labels, indices_tuple=None):
            sims = embeddings @ embeddings.t()
            same = labels[:, None] == labels[None, :]
            off_diagonal = ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
            pos = torch.relu(params.pos_margin - sims[same & off_diagonal])
            neg = torch.relu(sims[~same] - params.neg_margin)
            pos_term = pos.mean() if pos.numel() else sims.sum() * 0
            neg_term = neg.mean() if neg.numel() else sims.sum() * 0
            return pos_term + neg_term

    return CosineContrastive()


@hookimpl
def register_losses(register):
    """Register the example loss."""
    register("example_cosine_contrastive", build_cosine_contrastive, params=CosineContrastiveParams,
             description="Example plugin: cosine contrastive loss over all pairs of the batch.")

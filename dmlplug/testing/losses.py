"""Contract checks of losses and miners."""

from __future__ import annotations

from typing import Any

from dmlplug.plugins import PluginHost
from dmlplug.testing.fixtures import (
    EMBEDDING_SIZE,
    NUM_CLASSES,
    ContractError,
    Declared,
    batch_labels,
    build,
    expect,
    expect_groups_declared,
    finite_grads,
    load_host,
    make_context,
    random_embeddings,
    tagged_table,
)


def check_loss(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A loss builds from its defaults, gives a finite scalar and finite gradients, and its tags are true.

    Declared optimizer groups are checked against the built loss (``Params.optimizer_group_names("loss")``).
    Tags checked against behaviour: ``uses_tuples`` (mined triplets change the value), ``has_parameters``
    (trainable parameters), ``proxies`` (:func:`dmlplug.proxies.class_proxies` finds ``C×D``
    trainable proxies; without the tag it must not), ``needs_num_classes`` (building without
    ``num_classes`` fails with a message naming it).
    """
    import torch
    from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

    from dmlplug.proxies import class_proxies

    host = host or load_host()
    params = params or {}
    info = Declared(host, "losses", name, params)
    tags = [r.split(":", 1)[1] for r in info.requires if r.startswith("loss:")]
    # A loss that requires loss:<tag> (a wrapper of another loss) finds one offering it in the context.
    ctx = make_context(host, loss=tagged_table(host, "losses", tags).build(make_context(host)) if tags else None)
    torch.manual_seed(0)
    loss = build("losses", name, ctx, **params)
    raw, embeddings = random_embeddings()
    labels = batch_labels()
    value = loss(embeddings, labels)
    expect(isinstance(value, torch.Tensor) and value.dim() == 0 and bool(torch.isfinite(value)),
           f"loss {name!r}: expected a finite scalar tensor, got {value!r}")
    value.backward()
    finite_grads(f"loss {name!r}", [raw, *loss.parameters()])
    expect_groups_declared(f"loss {name!r}", loss, info.params, "loss")
    expect(raw.grad is not None, f"loss {name!r}: no gradient reaches the embeddings")

    fixed = embeddings.detach()
    partial = tuple(t[:40] for t in lmu.get_all_triplets_indices(labels))

    def value_with(indices_tuple: Any) -> Any:
        torch.manual_seed(1)  # fresh, identically initialised loss: stateful losses compare fairly
        return build("losses", name, ctx, **params)(fixed, labels, indices_tuple)

    without = value_with(None)
    try:
        changed = not torch.allclose(without, value_with(partial))
    except (ValueError, AssertionError):
        changed = False  # the loss rejects mined tuples
    expect(changed == ("uses_tuples" in info.tags),
           f"loss {name!r}: mined tuples {'change' if changed else 'do not change'} the value, but the tag "
           f"uses_tuples is {'missing' if changed else 'set'}")
    has_params = any(p.requires_grad for p in loss.parameters())
    expect(has_params == ("has_parameters" in info.tags),
           f"loss {name!r}: has_parameters tag {'missing' if has_params else 'set without trainable parameters'}")
    if "proxies" in info.tags:
        proxies = class_proxies(loss)
        expect(tuple(proxies.shape) == (NUM_CLASSES, EMBEDDING_SIZE) and proxies.requires_grad,
               f"loss {name!r}: tagged proxies but class_proxies gives {tuple(proxies.shape)}")
    else:
        try:
            class_proxies(loss)
        except TypeError:
            pass
        else:
            raise ContractError(f"loss {name!r}: has class proxies but lacks the 'proxies' tag")
    if "needs_num_classes" in info.tags:
        try:
            build("losses", name, make_context(host, num_classes=None), **params)
        except Exception as exc:
            expect("num_classes" in str(exc), f"loss {name!r}: building without num_classes fails, but the "
                                              f"message does not name it: {exc}")
        else:
            raise ContractError(f"loss {name!r}: tagged needs_num_classes but builds without num_classes")


def miner_labels(info: Any) -> Any:
    """Labels of a batch for the miner: grouped classes, or (anchor, positive, negative) triples."""
    import torch

    if "packaged_triplets" in info.tags:
        # (anchor, positive, negative) triples: class c, class c, class c+1.
        return torch.tensor([[c, c, (c + 1) % NUM_CLASSES] for c in range(10)]).flatten() % NUM_CLASSES
    return batch_labels()


def check_miner(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A miner returns valid pairs ``(a1, p, a2, n)`` or triplets ``(a, p, n)`` as its tags say, on an easy batch."""
    import torch

    host = host or load_host()
    info = Declared(host, "miners", name, params)
    torch.manual_seed(0)
    miner = build("miners", name, make_context(host), **(params or {}))
    labels = miner_labels(info)
    _, embeddings = random_embeddings(len(labels))
    tuples = miner(embeddings, labels)
    expect("triplets" in info.tags or "pairs" in info.tags, f"miner {name!r}: tag it 'pairs' or 'triplets'")
    expected = 3 if "triplets" in info.tags else 4
    expect(len(tuples) == expected, f"miner {name!r}: returned a {len(tuples)}-tuple, tags {sorted(info.tags)}")
    for t in tuples:
        expect(t.dtype == torch.long and t.dim() == 1, f"miner {name!r}: indices must be 1-d int64 tensors")
        expect(len(t) == 0 or (int(t.min()) >= 0 and int(t.max()) < len(labels)),
               f"miner {name!r}: index out of range")
    groups = [tuples] if expected == 3 else [tuples[:2], tuples[2:]]
    for group in groups:
        expect(len({len(t) for t in group}) == 1, f"miner {name!r}: ragged index tuple")
    expect(sum(len(t) for t in tuples) > 0, f"miner {name!r}: mined nothing on an easy batch")
    y = labels
    if expected == 4:
        a1, p, a2, n = tuples
        expect(bool((y[a1] == y[p]).all() and (a1 != p).all()), f"miner {name!r}: invalid positive pairs")
        expect(bool((y[a2] != y[n]).all()), f"miner {name!r}: invalid negative pairs")
    else:
        a, p, n = tuples
        regular = (y[a] == y[p]) & (a != p) & (y[n] != y[a])
        if "rho_swap" in info.tags:
            # ρ-regularisation: (a, a, p') with p' another sample of a's class.
            regular |= (a == p) & (y[n] == y[a]) & (n != a)
        expect(bool(regular.all()), f"miner {name!r}: invalid triplets")

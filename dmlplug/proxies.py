"""Uniform access to the class proxies of proxy-based losses."""

from __future__ import annotations

from typing import Any


def class_proxies(loss: Any) -> Any:
    """Return the ``C×D`` class-proxy tensor of a proxy-based loss (not normalised, not detached).

    Understands pytorch-metric-learning's layouts: ``proxies`` (``C×D``: ProxyAnchor, ProxyNCA),
    ``W`` (``D×C``: ArcFace, CosFace, NormalizedSoftmax, LargeMarginSoftmax, SphereFace …; SubCenterArcFace
    stores ``D×(C·k)`` and the first centre of each class is used) and ``fc`` (SoftTriple, ``D×(C·k)``, first
    centre of each class). A loss may also define ``class_proxies()`` itself.

    Raises:
        TypeError: The loss has no proxies.
    """
    if hasattr(loss, "class_proxies") and callable(loss.class_proxies):
        return loss.class_proxies()
    num_classes = getattr(loss, "num_classes", None)
    if getattr(loss, "proxies", None) is not None:
        return loss.proxies
    for attr in ("W", "fc"):
        weight = getattr(loss, attr, None)
        if weight is None or getattr(weight, "dim", lambda: 0)() != 2:
            continue
        per_class = weight.t()
        if num_classes and per_class.shape[0] != num_classes:
            k = per_class.shape[0] // num_classes
            # Sub-centre layouts store the k centres of a class contiguously: class c owns rows c*k..c*k+k-1.
            per_class = per_class.reshape(num_classes, k, -1)[:, 0]
        return per_class
    raise TypeError(f"{type(loss).__name__} has no class proxies")

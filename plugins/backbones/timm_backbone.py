"""A timm model as a dmlplug backbone: ``(pooled features, feature map)``, frozen BatchNorm, local weights.

Imported only by the factory in :mod:`dmlplug_builtins.backbones` (torch and timm at module level).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import timm
import torch
from torch import nn

from dmlplug.errors import ComponentError


class TimmBackbone(nn.Module):
    """A timm model without classifier; pools its feature map itself so the map is available too.

    Args:
        model: A timm model created with ``num_classes=0, global_pool=""``.
        pool: ``"avg"``, ``"max"`` or ``"avgmax"`` (their sum).
        frozen_bn: Keep every BatchNorm in eval mode, whatever ``train()`` says.
        layer_decay: Layer-wise learning-rate decay of :meth:`optimizer_param_groups` (``None``: one group).
        input_norm: ``(mean, std)`` the model's weights expect, when not ImageNet's: the ImageNet-normalised
            input is re-normalised to them before the model (``None``: the input as it comes).
    """

    #: The timm model: an ``nn.Module`` whose timm attributes (``num_features``, ``forward_features``) the
    #: static type of ``nn.Module`` does not know.
    body: Any
    #: ``x · scale + shift`` re-normalises the input (:func:`renormalization`); both ``None`` without ``input_norm``.
    scale: torch.Tensor | None
    shift: torch.Tensor | None

    def __init__(self, model: Any, pool: str = "avg", frozen_bn: bool = False, layer_decay: float | None = None,
                 input_norm: tuple[Sequence[float], Sequence[float]] | None = None) -> None:
        super().__init__()
        self.body = model
        self.num_features = int(model.num_features)
        self.frozen_bn = frozen_bn
        self.pool = pool
        self.layer_decay = layer_decay
        scale, shift = renormalization(*input_norm) if input_norm is not None else (None, None)
        # Not persistent: the recipe rebuilds them (checkpoints keep the keys of a plain timm model).
        self.register_buffer("scale", scale, persistent=False)
        self.register_buffer("shift", shift, persistent=False)
        if self.frozen_bn:
            self.train(True)

    def train(self, mode: bool = True) -> TimmBackbone:
        """Set the training mode; BatchNorm stays in eval mode when ``frozen_bn``."""
        # Frozen BN (docs/methods/revisiting.md): batch statistics are never used, whatever model.train() says.
        super().train(mode)
        if self.frozen_bn:
            for module in self.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.eval()
        return self

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """One group ``backbone``; with ``layer_decay``, its layers as parts ``backbone.layer<N>`` of it."""
        if self.layer_decay is None:
            return [{"name": "backbone", "params": list(self.parameters())}]
        from dmlplug_builtins.backbones.layer_decay import layer_decay_groups

        return layer_decay_groups(self.body, self.layer_decay, parent="backbone")

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(B×F pooled features, B×F×h×w feature map)``; the map is ``None`` for token models (ViT)."""
        if self.scale is not None and self.shift is not None:
            images = images * self.scale + self.shift
        feature_map = self.body.forward_features(images)
        if feature_map.dim() == 4 and getattr(self.body, "output_fmt", "NCHW") == "NHWC":
            feature_map = feature_map.permute(0, 3, 1, 2)  # Swin & co. give B×h×w×F; the contract is B×F×h×w
        if feature_map.dim() == 3:  # token models (ViT): B×N×C -> mean over tokens, no spatial map
            return feature_map.mean(1), None
        if self.pool == "avg":
            pooled = feature_map.mean((2, 3))
        elif self.pool == "max":
            pooled = feature_map.amax((2, 3))
        else:
            pooled = feature_map.mean((2, 3)) + feature_map.amax((2, 3))
        return pooled, feature_map


def renormalization(mean: Sequence[float], std: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, shift)``, ``1×C×1×1``: ``x · scale + shift`` turns ImageNet-normalised input into ``mean``/``std``'s.

    The pipeline gives ``x = (v - m_in) / s_in``; the weights want ``(v - mean) / std``, which is
    ``x · s_in / std + (m_in - mean) / std``.
    """
    from dmlplug.data.transforms import IMAGENET_MEAN, IMAGENET_STD

    m_in, s_in = torch.tensor(IMAGENET_MEAN), torch.tensor(IMAGENET_STD)
    m, s = torch.tensor(tuple(mean), dtype=torch.float32), torch.tensor(tuple(std), dtype=torch.float32)
    return (s_in / s).view(1, -1, 1, 1), ((m_in - m) / s).view(1, -1, 1, 1)


def weights_norm(model: Any) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The ``(mean, std)`` of the model's weights (timm's pretrained config) when they are not ImageNet's, else None.

    ``None`` too for input that is not three-channel (the statistics are per RGB channel).
    """
    from dmlplug.data.transforms import IMAGENET_MEAN, IMAGENET_STD

    cfg = getattr(model, "pretrained_cfg", None) or {}
    mean, std = cfg.get("mean"), cfg.get("std")
    if mean is None or std is None or len(mean) != 3 or len(std) != 3 or _in_chans(model) != 3:
        return None
    same = all(abs(a - b) < 1e-6 for a, b in zip((*mean, *std), (*IMAGENET_MEAN, *IMAGENET_STD), strict=True))
    return None if same else (tuple(mean), tuple(std))


def _in_chans(model: Any) -> int | None:
    first = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)
    return None if first is None else int(first.in_channels)


def check_input_size(model: Any, name: str, image_size: int | None) -> None:
    """A ComponentError when a ViT built for one input size would get ``image_size`` (``[data] image_size``).

    A timm patch embedding with a fixed grid rejects other sizes at the first forward pass, after the data and
    the model are built; this says so at build time, with the fix. Models without a fixed grid (CNNs, ViTs built
    with ``dynamic_img_size``) and ``image_size = None`` (a backbone built outside a run) are not judged.
    """
    patch_embed = getattr(model, "patch_embed", None)
    grid = getattr(patch_embed, "img_size", None)
    if image_size is None or grid is None or not getattr(patch_embed, "strict_img_size", False):
        return
    if getattr(model, "dynamic_img_size", False) or tuple(grid) == (image_size, image_size):
        return
    size = "×".join(str(int(n)) for n in grid)
    raise ComponentError(
        f"timm model {name!r} is built for {size} inputs, but [data] image_size is {image_size}",
        where="[backbone] img_size",
        fix=f'set img_size = "data" (timm resamples the pretrained position embeddings to the new grid; a multiple '
            f"of the patch size keeps every pixel), or [data] image_size = {int(grid[0])}",
    )


def check_model_name(name: str) -> None:
    """Raise a ComponentError with close names when timm has no model ``name``."""
    if name not in timm.list_models() and not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ComponentError(f"unknown timm model {name!r}{hint}", where="[backbone] model",
                             fix="see timm.list_models() for valid names")


def create_model(name: str, pretrained: bool | str, in_chans: int, img_size: int | None = None) -> nn.Module:
    """A timm feature extractor with random, pretrained (Hugging Face hub, as timm fetches them) or file weights.

    ``pretrained = true``: the weights file is first resolved with huggingface_hub's ``hf_hub_download``, which
    downloads into the user's cache when online and reads the cache offline, by its own settings (``HF_HUB_OFFLINE``,
    ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_ENDPOINT``, tokens …: none is set or overridden here). A missing offline copy
    is a :class:`ComponentError` before timm builds anything; timm then loads that file through its own pretrained
    path (``pretrained_cfg_overlay={"file": ...}``: its checkpoint filters, classifier removal, ``in_chans``).
    """
    kwargs: dict[str, Any] = {"num_classes": 0, "global_pool": "", "in_chans": in_chans}
    if img_size is not None:
        kwargs["img_size"] = img_size
    try:
        return _create(name, pretrained, kwargs)
    except TypeError as exc:  # the model class has no img_size argument (a CNN)
        if img_size is None or "img_size" not in str(exc):
            raise
        raise ComponentError(
            f"timm model {name!r} takes no img_size: {_first_lines(exc)}", where="[backbone] img_size",
            fix="remove img_size: only models built for one input size (ViTs and their kin) take it",
        ) from exc


def _create(name: str, pretrained: bool | str, kwargs: dict[str, Any]) -> nn.Module:
    """:func:`create_model` once its keyword arguments are set."""
    if isinstance(pretrained, str):
        path = Path(os.path.expanduser(pretrained))
        if not path.is_file():
            raise ComponentError(
                f"pretrained weights file not found: {path}", where="[backbone] pretrained",
                fix="point `pretrained` at an existing weights file, set pretrained = true for timm's weights of "
                    "the model (downloaded into the Hugging Face cache), or pretrained = false",
            )
        model = timm.create_model(name, pretrained=False, **kwargs)
        load_state(model, path)
        return model
    if not pretrained:
        return timm.create_model(name, pretrained=False, **kwargs)
    if ":" in name:  # hf-hub:org/repo or local-dir:path: timm resolves these names itself
        return _timm_pretrained(name, kwargs, None)
    return _timm_pretrained(name, kwargs, hub_weights_file(name))


def _timm_pretrained(name: str, kwargs: dict[str, Any], path: Path | None) -> nn.Module:
    """``timm.create_model(pretrained=True)``, from ``path`` when given; a ComponentError naming what failed."""
    overlay = None if path is None else {"file": str(path)}
    try:
        return timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs)
    except RuntimeError as exc:  # load_state_dict: missing / unexpected keys, shape mismatch
        source = f"weights file {path}" if path is not None else f"the pretrained weights of {name!r}"
        raise ComponentError(
            f"{source} does not fit timm model {name!r}: {_first_lines(exc)}", where="[backbone] pretrained",
            fix="the file belongs to another architecture or is damaged: check [backbone] model, or delete the "
                "file (for a cached one, its models--… folder in the Hugging Face cache) to fetch it again",
        ) from exc
    except OSError as exc:  # hf-hub:/local-dir: names that cannot be fetched
        raise ComponentError(f"cannot load the pretrained weights of {name!r}: {type(exc).__name__}: {exc}",
                             where="[backbone] pretrained", fix=_OFFLINE_FIX) from exc


_OFFLINE_FIX = ("run once with network access (HF_HUB_OFFLINE unset or 0) so the weights land in the Hugging Face "
                "cache (HF_HUB_CACHE / HF_HOME), or set `pretrained` to a local weights file path")


def hub_weights_file(name: str) -> Path | None:
    """The local file holding timm's pretrained weights of ``name`` (``arch`` or ``arch.tag``).

    For weights on the Hugging Face hub (nearly all of timm's), the file timm would load: ``hf_hub_filename`` or
    ``model.safetensors``, else ``pytorch_model.bin``, fetched with ``hf_hub_download`` (the hub's cache, offline
    mode and endpoint). For the few weights timm fetches from a URL, ``None`` (timm downloads them into torch's hub
    cache), after checking that an offline run has them there.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.constants import is_offline_mode
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError
    from timm.models import get_deprecated_models, get_pretrained_cfg

    cfg = get_pretrained_cfg(get_deprecated_models().get(name) or name)
    if cfg is None or not cfg.has_weights:
        raise ComponentError(f"timm has no pretrained weights for {name!r}", where="[backbone] pretrained",
                             fix="set pretrained = false, or point it at a local weights file")
    tag = f"{cfg.architecture}.{cfg.tag}" if cfg.tag else name
    if not cfg.hf_hub_id:
        _check_url_weights(tag, str(cfg.url or ""), is_offline_mode())
        return None
    repo_id, _, revision = cfg.hf_hub_id.partition("@")
    filenames = [cfg.hf_hub_filename] if cfg.hf_hub_filename else ["model.safetensors", "pytorch_model.bin"]
    errors: list[str] = []
    for filename in filenames:
        try:
            # After one unreachable-hub failure, the other candidates are only looked up in the cache: the hub
            # retries a file it cannot reach and has no copy of for ~20 s, once is enough.
            return Path(hf_hub_download(repo_id, filename, revision=revision or None, library_name="timm",
                                        library_version=timm.__version__, local_files_only=bool(errors)))
        except LocalEntryNotFoundError as exc:  # offline (or the hub unreachable) and not in the cache
            errors.append(f"{filename}: {_first_lines(exc)}")
        except EntryNotFoundError:  # the repository has no such file: timm's next candidate
            continue
        except Exception as exc:  # the hub answered with an error (unknown repo, gated, server error …)
            raise ComponentError(
                f"cannot fetch the pretrained weights of {tag!r} ({repo_id}/{filename}) from the Hugging Face hub: "
                f"{type(exc).__name__}: {_first_lines(exc)}", where="[backbone] pretrained", fix=_OFFLINE_FIX,
            ) from exc
    from huggingface_hub.constants import ENDPOINT, HF_HUB_CACHE

    offline = is_offline_mode()
    state = "HF_HUB_OFFLINE is set" if offline else f"the Hugging Face hub ({ENDPOINT}) cannot be reached"
    detail = f" ({errors[0]})" if errors and not offline else ""  # offline, the hub's text only says "connection"
    fix = _OFFLINE_FIX if offline else (
        "check the network connection (HF_ENDPOINT, proxy settings); with no network: "
        + _OFFLINE_FIX + "; with a filled cache, HF_HUB_OFFLINE=1 skips the hub's retries")
    raise ComponentError(
        f"the pretrained weights of timm model {tag!r} (repository {repo_id}, {' or '.join(filenames)}) are not in "
        f"the Hugging Face cache {HF_HUB_CACHE} and {state}{detail}",
        where="[backbone] pretrained", fix=fix,
    )


def _check_url_weights(tag: str, url: str, offline: bool) -> None:
    """For weights timm fetches from ``url`` (torch's hub cache): offline, a ComponentError when not cached."""
    from urllib.parse import urlparse

    cached = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)
    if offline and not cached.is_file():
        raise ComponentError(
            f"the pretrained weights of timm model {tag!r} come from {url}, not the Hugging Face hub, and are not in "
            f"torch's cache ({cached}) while HF_HUB_OFFLINE is set", where="[backbone] pretrained", fix=_OFFLINE_FIX)


def _first_lines(exc: BaseException, n: int = 3) -> str:
    return " ".join(str(exc).strip().splitlines()[:n])


def load_state(model: nn.Module, path: Path) -> None:
    """Load a weights file into ``model``, ignoring classifier weights; a ComponentError when it does not fit."""
    state: Any
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ComponentError(f"cannot read weights file {path}: {type(exc).__name__}: {exc}",
                             where="[backbone] pretrained") from exc
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    # Classifier weights of an ImageNet checkpoint have no place in a feature extractor.
    fix = "check that the file belongs to the model named in [backbone] model"
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # same keys, other shapes: another width / depth of the architecture
        raise ComponentError(f"weights file {path} does not match model: {_first_lines(exc)}",
                             where="[backbone] pretrained", fix=fix) from exc
    unexpected = [k for k in unexpected if not k.startswith(("fc.", "head.", "classifier."))]
    if missing or unexpected:
        raise ComponentError(
            f"weights file {path} does not match model: {len(missing)} missing keys (e.g. {missing[:3]}), "
            f"{len(unexpected)} unexpected keys (e.g. {unexpected[:3]})",
            where="[backbone] pretrained", fix=fix,
        )

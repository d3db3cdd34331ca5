"""Backbones from timm: any timm model name, with DML options (frozen BatchNorm, pooling, pretrained weights).

This module holds the Params, the factory and the registration hook and stays torch-free; the backbone
module is :class:`.timm_backbone.TimmBackbone`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from dmlplug import BuildContext, Params, hookimpl


class TimmParams(Params):
    """Parameters of the ``timm`` backbone."""

    model: str = Field(
        "resnet50",
        description="Any timm model name (`timm.list_models()`), optionally with a pretrained tag "
        "(`resnet50.tv_in1k`, `timm.list_pretrained()`) choosing the weights of `pretrained = true`.",
    )
    pretrained: bool | str = Field(
        False,
        description="false = random init; true = timm's pretrained weights of `model` (the tag it names, else "
        "timm's default tag), downloaded into the Hugging Face cache when online and read from it offline "
        "(HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_ENDPOINT honoured); a path = that local weights file.",
    )
    pool: Literal["avg", "max", "avgmax"] = Field(
        "avg", description="Global pooling of the feature map: average, max, or their sum (avg+max)."
    )
    frozen_bn: bool = Field(
        False, description="Keep BatchNorm in eval mode (running stats frozen; affine params still train)."
    )
    in_chans: int = Field(3, ge=1, description="Input channels.")
    img_size: int | Literal["data"] | None = Field(
        None, description='Input side length the model is built for, for timm models that take one (ViTs: the '
        'grid of position embeddings, which timm resamples from the pretrained weights); "data" = [data] '
        "image_size; None = the model's own default (vit_small_patch14_dinov2: 518). The run checks at build time "
        "that a ViT's input size is [data] image_size.",
    )
    layer_decay: float | None = Field(
        None, gt=0, le=1,
        description="Layer-wise learning-rate decay (ViT fine-tuning recipes: 0.65-0.75): the backbone's layers, "
        "as timm's group_matcher numbers them (stem 0, block i i+1; the final norm with the last block), train in "
        "optimizer groups backbone.layer<N> at the backbone's lr times layer_decay^(L-N), L the top layer; "
        "[optimizer.groups.backbone] sets the backbone's lr. None = one group `backbone`.",
    )
    input_norm: Literal["auto", "imagenet"] = Field(
        "auto", description="auto: with pretrained weights whose mean/std (timm's pretrained config) are not "
        "ImageNet's (CLIP; augreg ViTs: 0.5/0.5), the backbone re-normalises the ImageNet-normalised input to "
        "theirs; imagenet: the input as the data pipeline normalises it.",
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, name: str) -> str:
        problem = unknown_timm_model(name)
        if problem:
            raise ValueError(problem)
        return name

    @field_validator("pretrained")
    @classmethod
    def _known_weights(cls, pretrained: bool | str, info: ValidationInfo) -> bool | str:
        model = info.data.get("model")  # absent when the model name itself was rejected
        problem = None if model is None else pretrained_problem(model, pretrained)
        if problem:
            raise ValueError(problem)
        return pretrained

    @field_validator("img_size", mode="before")
    @classmethod
    def _pixels_or_data(cls, value: Any) -> Any:
        # Before pydantic's coercion, which would read `true` as 1 pixel.
        if isinstance(value, bool) or (isinstance(value, int) and value < 8):
            raise ValueError(f'img_size is a side length of at least 8 pixels or "data", got {value!r}')
        return value

    def extra_tags(self) -> tuple[str, ...]:
        """``"feature_map"`` unless ``model`` is a token model (ViT family), judged from its name.

        Lets ``dmlplug validate`` reject a component that needs the spatial map without importing timm;
        the engine checks the real output again at the first training step.
        """
        name = self.model.lower()
        return () if name.startswith(_TOKEN_MODEL_PREFIXES) else ("feature_map",)


#: timm model families whose features are tokens (B×N×C), i.e. without a spatial feature map.
_TOKEN_MODEL_PREFIXES = (
    "vit", "deit", "beit", "eva", "cait", "xcit", "mixer", "resmlp", "gmlp", "flexivit", "crossvit", "tnt",
    "convit", "volo", "sequencer", "samvit", "naflexvit", "vitamin", "levit", "pit_",
)


def unknown_timm_model(name: str) -> str | None:
    """Why ``name`` is no timm model, judged from the installed timm's names; ``None`` when it is one.

    The names come from the JSON file stored for the installed timm version (:mod:`.timm_names`), so that
    ``dmlplug validate`` rejects a typo without importing timm or torch. When no file matches the installed
    version, they are read from the installed timm itself: that **imports timm (and torch)**, once per process.
    A pretrained tag (``resnet50.a1_in1k``) is allowed; Hugging Face / local-dir names (``hf-hub:…``) are not
    judged here, nor is anything when timm is not installed (or cannot be imported): the factory checks against
    timm itself when it builds the model.
    """
    from dmlplug.errors import did_you_mean
    from dmlplug_builtins.backbones.timm_names import known_names

    if ":" in name:
        return None
    try:
        names = known_names()
    except ImportError:  # a broken timm install: left to the factory, which reports the import error
        return None
    if names is None:  # timm is not installed
        return None
    arch, _, tag = name.partition(".")
    if arch in names.models or arch in names.deprecated:
        if not tag or names.pretrained is None or names.untrained is None:
            return None
        if name in names.pretrained or name in names.untrained:
            return None
        tags = sorted(n for n in names.pretrained | names.untrained if n.startswith(arch + "."))
        hint = did_you_mean(name, tags) or (f" (its tags: {', '.join(tags[:8])})" if tags else " (it has none)")
        return (f"timm model {arch!r} has no pretrained tag {tag!r}{hint}; the tags are "
                f"`python -c \"import timm; print(timm.list_pretrained('{arch}.*'))\"`")
    hint = did_you_mean(arch, names.models) or (" (e.g. 'resnet50', 'vit_small_patch16_224')")
    return (f"unknown timm model {name!r}{hint}; the names are timm.list_models() of timm {names.version}, "
            "e.g. `python -c \"import timm; print(timm.list_models('*resnet*'))\"`")


def _missing_file(pretrained: bool | str) -> str | None:
    """Why a weights file path cannot be read (it is not there), before a run builds the model; else ``None``."""
    import os
    from pathlib import Path

    if not isinstance(pretrained, str):
        return None
    path = Path(os.path.expanduser(pretrained))
    if path.is_file():
        return None
    return (f"pretrained weights file not found: {path} (a relative path is read from the folder the command runs "
            f"in, {Path.cwd()}); give the file's path, or pretrained = true for timm's weights of the model")


def pretrained_problem(model: str, pretrained: bool | str) -> str | None:
    """Why ``pretrained`` cannot work with ``model``, judged from the stored timm names; ``None`` when it can.

    ``pretrained = true`` needs weights timm can fetch for ``model`` (its tag, or the architecture's default tag):
    a model timm has no weights for is rejected here, before any run. A ``pretrained`` string is a file path; one
    that is a timm tag (``"tv_in1k"``, ``"resnet50.tv_in1k"``) is rejected with the recipe that names a tag.
    Whether the weights are in the Hugging Face cache (offline) is checked when the model is built.
    """
    from dmlplug_builtins.backbones.timm_names import known_names

    if ":" in model or pretrained is False:
        return None
    try:
        names = known_names()
    except ImportError:
        names = None
    if names is None or names.pretrained is None:
        return _missing_file(pretrained)
    model = names.deprecated.get(model, model)
    arch = model.partition(".")[0]
    if isinstance(pretrained, str):
        tag = pretrained if "." in pretrained and pretrained.partition(".")[0] in names.models else None
        tag = tag or (f"{arch}.{pretrained}" if f"{arch}.{pretrained}" in names.pretrained else None)
        if tag in names.pretrained:
            return (f"pretrained = {pretrained!r} is a timm pretrained tag, but a pretrained string is a weights "
                    f"file path; name the tag in the model and set pretrained = true: "
                    f"model = {tag!r}, pretrained = true")
        return _missing_file(pretrained)
    if "." in model:
        if model in names.pretrained:
            return None
        return f"timm has no pretrained weights for {model!r} (a tag without weights); set pretrained = false"
    if any(name.startswith(arch + ".") for name in names.pretrained):
        return None
    family = arch.split("_")[0]
    return (f"timm has no pretrained weights for {model!r}: set pretrained = false, point pretrained at a local "
            f"weights file, or choose a model timm has weights for "
            f"(`python -c \"import timm; print(timm.list_pretrained('{family}*'))\"`)")


def build_timm(params: TimmParams, ctx: BuildContext) -> Any:
    """Build a timm feature extractor returning ``(pooled features, feature map)``."""
    from dmlplug_builtins.backbones.timm_backbone import (
        TimmBackbone,
        check_input_size,
        check_model_name,
        create_model,
        weights_norm,
    )

    check_model_name(params.model)
    img_size = ctx.require("image_size") if params.img_size == "data" else params.img_size
    # Weights checked before timm builds the model.
    model = create_model(params.model, params.pretrained, params.in_chans, img_size=img_size)
    check_input_size(model, params.model, ctx.image_size)
    norm = weights_norm(model) if params.pretrained is not False and params.input_norm == "auto" else None
    return TimmBackbone(model, pool=params.pool, frozen_bn=params.frozen_bn, layer_decay=params.layer_decay,
                        input_norm=norm)


@hookimpl
def register_backbones(register: Any) -> None:
    """Register the timm backbone family."""
    register("timm", build_timm, params=TimmParams, tags=("features",),
             description="Any timm model as a feature extractor (pooling, frozen BN, pretrained or local weights).")

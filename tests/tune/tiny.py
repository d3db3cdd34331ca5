"""The tiny glyph recipe and space the tune tests search (seconds per run on a 2-core CPU)."""

import textwrap
from pathlib import Path

RECIPE = textwrap.dedent("""
    [run]
    name = "tiny"
    epochs = 1
    [data]
    batch_size = 8
    eval_batch_size = 256
    image_size = 32
    [data.dataset]
    name = "glyphs"
    num_classes = 40
    images_per_class = 4
    [data.sampler]
    name = "m_per_class"
    m = 2
    batches_per_epoch = 2
    [backbone]
    name = "timm"
    model = "resnet10t"
    [head]
    name = "linear"
    embedding_size = 8
    [loss]
    name = "multi_similarity"
    [optimizer]
    lr = 1e-3
    [evaluation]
    initial = false
    pictures = false
    metric = "map@r"
    [[evaluators]]
    name = "map_at_r"
    [[loggers]]
    name = "console"
""")

SPACE = textwrap.dedent("""
    recipe = "recipe.toml"
    [tune]
    folds = 2
    pruner = "none"
    sampler = "random"
    sampler_seed = 0
    [params."optimizer.lr"]
    type = "float"
    low = 1e-4
    high = 1e-2
    log = true
    [params."loss.alpha"]
    type = "float"
    low = 0.5
    high = 4.0
""")


def registry():
    """The process-wide plugin host's registry, where the tests' spaces find their samplers and pruners."""
    from dmlplug.plugins import get_host

    return get_host().registry


def write_tiny(folder: Path) -> Path:
    """The recipe and its space file in ``folder``; returns the space file."""
    (folder / "recipe.toml").write_text(RECIPE)
    (folder / "tiny.space.toml").write_text(SPACE)
    return folder / "tiny.space.toml"


class Scored:
    """What a runner returns, as far as a trial (``selection_metrics``) and a reproduction (``metrics``) read it."""

    def __init__(self, value):
        self.selection_metrics = {"map@r": value}
        self.metrics = {"map@r": value}


def scoring_runner(recipe, overrides, **options):
    """No training: the score is a smooth function of the sampled learning rate (1e-3 when none is sampled)."""
    lr = float(next((o for o in overrides if o.startswith("optimizer.lr=")), "=1e-3").partition("=")[2])
    return Scored(1.0 / (1.0 + abs(lr - 3e-3) * 100))

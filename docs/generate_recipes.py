"""Write docs/recipes.md from the section models in dmlplug/recipe/schema.py.

Run ``python docs/generate_recipes.py`` after changing a recipe section; tests/core/test_docs.py fails
when the committed file is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

HEADER = """# Recipe reference

Generated from `dmlplug/recipe/schema.py` by `python docs/generate_recipes.py` — do not edit by hand.

A recipe is a TOML file. Component tables (`[data.dataset]`, `[data.sampler]`, `[backbone]`, `[head]`,
`[loss]`, `[miner]`, `[[regularizers]]`, `[[evaluators]]`, `[[loggers]]`) hold a `name` — a registered component,
see `dmlplug list` and docs/components.md — and that component's parameters. A few keys of component tables
belong to the engine instead of the component:

| table | key | default | meaning |
|---|---|---|---|
| `[backbone]` | `warmup_epochs` | 0 | the backbone is frozen (no gradients) for the first N epochs |
| `[loss]` | `weight` | 1.0 | the loss enters the total as `weight * loss` |
| `[loss]` | `embedding` | "" | multi-head model: the named embedding the loss and miner use ("" = evaluation one) |
| `[[regularizers]]` | `weight` | 1.0 | each regularizer term enters the total as `weight * term` |

String values may use `${VAR}` or `${VAR:-default}` environment interpolation. Any value can be overridden
from the command line with `--set section.key=value` (values are parsed as TOML; list entries by index:
`--set regularizers.0.weight=2`). The resolved recipe (all defaults filled in) is saved in every run directory
as `recipe.resolved.toml`.

Optimizer parameter groups are named `backbone`, `head`, `loss`, and after each regularizer (components may
declare finer groups, e.g. NIR's flow); `[optimizer.groups.<name>]` sets `lr`, `lr_mult` or `weight_decay`
of one group.
"""


def _default(field) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    return f"`{value!r}`"


def render() -> str:
    """The Markdown text of the recipe reference."""
    from dmlplug.recipe import schema as r

    sections = [
        ("[run]", r.RunSection), ("[data]", r.DataSection), ("[optimizer]", r.OptimizerSection),
        ("[optimizer.groups.<name>]", r.GroupOverride), ("[scheduler]", r.SchedulerSection),
        ("[evaluation]", r.EvaluationSection), ("top level", r.Recipe),
    ]
    parts = [HEADER]
    for title, model in sections:
        doc = (model.__doc__ or "").strip()
        parts.append(f"\n## {title}\n\n{doc}\n\n| key | default | description |\n|---|---|---|\n")
        for name, field in model.model_fields.items():
            parts.append(f"| `{name}` | {_default(field)} | {field.description or ''} |\n")
    return "".join(parts)


if __name__ == "__main__":
    target = Path(__file__).with_name("recipes.md")
    target.write_text(render())
    sys.stdout.write(f"wrote {target}\n")

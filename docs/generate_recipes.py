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
of one group. With `[backbone] layer_decay` the backbone trains in one group per layer, `backbone.layer<N>`, at
decaying rates; `[optimizer.groups.backbone]` sets the rate of the top layer, and so of all of them
(docs/backbones.md, "Vision transformers").

**No credentials.** A value holding a password (a `user:password@` URL, a key named `password`, `token`, `secret` or
`api_key`) is refused before anything else is checked: the run directory and every checkpoint keep the resolved
recipe. Credentials go in the environment (docs/monitoring.md, "Credentials").

**Every mistake in one pass.** `dmlplug validate` (and `dmlplug run` before it builds anything) checks the structure
of every section, then every component table, each whatever the others gave, and reports all the mistakes it found
in one message (exit status 2), each with where it is, its fix and its did-you-mean:

```
error: the recipe has 3 mistakes:
  1. invalid recipe:
       evaluation.metrc: unknown key (did you mean 'metric'?)
     where: my.toml
     fix:   see docs/recipes.md for every section and key
  2. unknown loss 'multi_similarty' (did you mean 'multi_similarity' or ...?)
     where: my.toml: loss.name
     fix:   run `dmlplug list losses` to see every registered loss
  3. optimizer.lrr: unknown key (did you mean 'lr'?)
     where: my.toml
     fix:   the keys of optimizer besides the component's: name, lr, weight_decay, groups; ...
  where: my.toml
  fix:   correct each one as its own fix says, then validate again; the checks across sections (selection
         metric, splits, batch size, capabilities) run once these are corrected
```

The checks across sections (the selection metric an evaluator must produce, the validation split, the split sizes,
the batch size and the classes in a batch, the components' required tags, the optimizer groups) read every table,
so they run once every table is valid; they too report all their mistakes together, except a check that depends on
one that failed (the classes in a batch are counted only for a batch size the sampler takes). A single mistake is
reported as it always was, without the numbering.
"""

SELECTION = """
## Which split selects

`[evaluation] select_on` decides what `checkpoints/best.pt` is, and with it `results.json`'s `best_metrics`, the
`best` column of `dmlplug report`, what a metric-following LR schedule (`plateau`) follows and what `dmlplug
export` exports by default:

| `select_on` | `best.pt` | when |
|---|---|---|
| `"val"` | the best evaluation of the validation split (class-disjoint classes) | the dataset has validation classes |
| `"last"` | the last epoch's model: no split selects | always |
| `"test"` | the best evaluation of the **test** split | only when the recipe says so in so many words |
| `"auto"` (default) | `"val"` when the dataset has validation classes, else `"last"` | |

`auto` never selects on the test split. A checkpoint chosen by the test classes makes its test numbers optimistic,
and Musgrave et al. ("A Metric Learning Reality Check", ECCV 2020) showed how much of a decade of reported
progress came from exactly this. Without a validation split, `auto` takes the last epoch rather than refusing to
run. The other honest option is to refuse and ask for validation classes, and `auto` does not take it for two
reasons. First, the last epoch is what a fixed schedule (`[run] epochs`) commits to before any test number is
seen, so it is a legitimate protocol on its own. Second, validation classes change the training classes (they are
carved out of them), which a recipe should do on purpose, not because a default forced it.
`dmlplug validate` prints which split selects and why, for example:

```text
selection: no split selects: best.pt is the last epoch's model (select_on = "auto", and dataset 'cub200' has no
validation classes; ...); to select on validation classes, carve validation classes out of the training classes:
--set data.dataset.val_classes=0.25 ...
```

**Selecting on validation classes in one command.** Every built-in dataset takes a parameter that carves
class-disjoint validation classes out of its training classes (the Reality-Check protocol validates on a quarter of
the training classes, one of its four folds): `val_classes` for the file datasets (`cub200`, `cars196`, `sop`,
`inaturalist2018`, `folder`, `csv`: a fraction in (0, 1) or a whole count) and `val_fraction` for `glyphs`. With
`select_on = "auto"` such a run then selects on validation and reports the selected checkpoint on the test split:

```bash
dmlplug run recipes/cub_margin.toml --set data.dataset.val_classes=0.25
```

That trains on the remaining training classes (75 of CUB's 100), so its test numbers are not those of the
full-training-set protocol, but none of them was chosen by the test set. The quickstart has validation classes
of its own (`val_fraction = 0.2`), so its `best.pt` and its bundle's thresholds never come from the test split.
Dataset plugins name theirs with `Params.validation_parameter()`, and `dmlplug validate`
shows it in its advice.

**Selecting on test.** A recipe that wants the papers' "best test epoch" says `select_on = "test"`. Every place
that shows such a number labels it: `dmlplug validate`, the console (`epoch 4 test (selects best.pt)`,
`best.pt = epoch 4, selected on TEST`), `results.json` (`selected_on = "test"`), `dmlplug report`
(`†test-selected` on the best values), TensorBoard (text `run/selection`, hyper-parameter `dmlplug.selected_on`),
the mlflow tag and the wandb config key `dmlplug.selected_on`, and the bundle (`bundle.json`
`source.selected_on`; `export` warns).

**LR schedules that follow the metric.** `plateau` follows the selection metric (it requires the engine service
`selection_metric`). With `select_on = "last"` there is no selection metric, and the test metric is never handed to
it, so `dmlplug validate` refuses `plateau` for such a run. Give the dataset validation classes, say
`select_on = "test"` (labelled as above), or choose a schedule that ignores the metric.
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
    parts.append(SELECTION)
    return "".join(parts)


if __name__ == "__main__":
    target = Path(__file__).with_name("recipes.md")
    target.write_text(render())
    sys.stdout.write(f"wrote {target}\n")

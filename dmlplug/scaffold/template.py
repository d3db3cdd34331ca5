"""What ``dmlplug plugin new --kind KIND`` writes for one kind: a :class:`KindTemplate` and how it becomes files.

Every kind's template (:mod:`~dmlplug.scaffold.kinds_training`, :mod:`~dmlplug.scaffold.kinds_data`,
:mod:`~dmlplug.scaffold.kinds_search`) fills the same skeleton: a torch-free ``__init__.py`` (Params, factory,
``register_<kind>`` hook), the implementation module beside it, and a test file whose tests check the component
with :mod:`dmlplug.testing` where the kit has a check for its kind, and against answers known by hand. Templates
use ``string.Template`` placeholders (``$Class``, ``$name``, ``$module`` …), so the code in them keeps its braces.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from string import Template


@dataclass(frozen=True)
class KindTemplate:
    """The generated code of one kind.

    Attributes:
        suffix: The component's name is ``<plugin>_<suffix>`` (``my_loss_contrastive``).
        module: The implementation module's name (``loss`` -> ``dmlplug_<plugin>/loss.py``).
        class_suffix: The implementation class is ``<Camel><class_suffix>`` (``MyLossLoss``).
        description: One line for ``dmlplug list``.
        params: The Params model's fields (class-body lines, unindented).
        factory: The factory's body after the import of the class (unindented); it returns the component.
        implementation: The implementation module's source.
        tests: The test module's source after its docstring.
        recipe: How a recipe (or command line) names the component, for the README.
        register_extra: Extra keyword arguments of ``register`` (``tags=...``), without a leading comma.
        checked: Whether :func:`dmlplug.testing.check_plugin` has a contract check for the kind.
        typing_names: Names ``__init__.py`` imports from :mod:`typing` besides ``Any`` (its Params' types).
    """

    suffix: str
    module: str
    class_suffix: str
    description: str
    params: str
    factory: str
    implementation: str
    tests: str
    recipe: str
    register_extra: str = ""
    checked: bool = True
    typing_names: tuple[str, ...] = ()


MODULE = '''"""$dist: registers the $singular ``$name`` with dmlplug.

This module is the plugin: Params, factory and hook. It stays torch-free: the factory imports the
implementation, ``$module.$impl``, so loading the plugin and validating recipes stay fast.
"""

from __future__ import annotations

from typing import $typing_names

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.protocols import Register


class ${camel}Params(Params):
    """Parameters of ``$name``."""

$params


def build_$short(params: ${camel}Params, ctx: BuildContext) -> Any:
    """Build ``$name`` from its validated parameters."""
    # Heavy imports inside the factory: loading the plugin stays fast.
    from $module.$impl import $Class

$factory


@hookimpl
def register_$kind(register: Register) -> None:
    """Register ``$name``."""
    register("$name", build_$short, params=${camel}Params,
             description="$description"$register_extra)
'''

TESTS = '''"""Tests of $dist: dmlplug's contract checks and known answers."""

'''

README = '''# $dist

A [dmlplug](https://pypi.org/project/dmlplug/) plugin that registers the $singular `$name`.

```bash
pip install -e .              # dmlplug finds the plugin through the `dmlplug` entry point
dmlplug plugins               # lists $module
dmlplug list $kind            # lists $name
python -m pytest -q tests     # dmlplug's contract checks and the known-answer tests
```

Use it:

```
$recipe
```
'''


def render(template: KindTemplate, names: dict[str, str]) -> dict[str, str]:
    """The files of the plugin package (paths relative to the distribution) for ``template`` and ``names``.

    Args:
        template: The kind's template.
        names: ``dist``, ``module``, ``short`` (the plugin's snake name), ``camel``, ``kind``, ``singular``.
    """
    values = {**names, "name": f"{names['short']}_{template.suffix}", "Class": names["camel"] + template.class_suffix,
              "impl": template.module, "description": template.description,
              "register_extra": f",\n             {template.register_extra}" if template.register_extra else "",
              "typing_names": ", ".join(sorted({"Any", *template.typing_names})),
              "params": textwrap.indent(template.params.strip("\n"), "    "),
              "factory": textwrap.indent(template.factory.strip("\n"), "    ")}

    def fill(text: str) -> str:
        return Template(text).substitute(values)

    # the factory and the params are code too: their placeholders are filled before they are placed
    values["factory"], values["params"] = fill(values["factory"]), fill(values["params"])

    module = names["module"]
    return {f"{module}/__init__.py": fill(MODULE), f"{module}/{template.module}.py": fill(template.implementation),
            f"tests/test_{names['short']}.py": fill(TESTS + template.tests.lstrip("\n")),
            "README.md": fill(README.replace("$recipe", template.recipe.strip("\n")))}

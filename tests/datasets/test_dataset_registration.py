"""The datasets plugin registers like any plugin: documented params, an import-light package and loaders."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dmlplug.registry import Registry
from dmlplug_builtins.datasets import FileDatasetParams, register_datasets

# loader module -> registered dataset names
MODULES = {
    "cub200": ["cub200"],
    "cars196": ["cars196"],
    "sop": ["sop"],
    "inaturalist": ["inaturalist2018"],
    "folder": ["folder"],
    "csv_list": ["csv"],
}
FILE_DATASETS = sorted(n for names in MODULES.values() for n in names)


def _registry():
    registry = Registry()
    register_datasets(registry.register_callback("datasets", "builtin"))
    return registry


def test_every_dataset_registers_under_its_name_with_documented_params():
    registry = _registry()
    assert registry.names("datasets") == sorted([*FILE_DATASETS, "glyphs"])
    for info in registry.infos("datasets"):
        assert info.description
        for field_name, field in info.params.model_fields.items():
            assert field.description, f"{info.name}.{field_name} has no description"
    for name in FILE_DATASETS:
        info = registry.get("datasets", name)
        assert issubclass(info.params, FileDatasetParams)
        for key in ("root", "val_classes", "decode_errors"):
            assert key in info.params.model_fields
    assert registry.get("datasets", "cub").name == "cub200"  # aliases


def test_each_loader_module_names_its_messages_after_the_registered_dataset():
    import importlib

    for module, names in MODULES.items():
        loader = importlib.import_module(f"dmlplug_builtins.datasets.{module}")
        assert names == [loader.NAME] and callable(loader.build_bundle)


@pytest.mark.parametrize("value", [0.2, 5, 0])
def test_val_classes_accepts_fractions_and_counts(value):
    info = _registry().get("datasets", "cub200")
    assert info.validate({"val_classes": value}, where="data.dataset").val_classes == value


def test_val_classes_rejects_fractional_counts():
    from dmlplug.errors import RecipeError

    with pytest.raises(RecipeError, match="whole number"):
        _registry().get("datasets", "cub200").validate({"val_classes": 2.5}, where="data.dataset")


def test_plugin_and_loader_modules_do_not_import_torch_or_numpy():
    modules = ", ".join(["dmlplug_builtins.datasets", *(f"dmlplug_builtins.datasets.{m}" for m in MODULES)])
    code = (f"import sys, importlib\nfor m in '{modules}'.split(', '): importlib.import_module(m)\n"
            "print(sorted(m for m in ('torch', 'torchvision', 'numpy', 'PIL', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

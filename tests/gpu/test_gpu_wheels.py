"""The offline wheel list of the GPU machine (benchmarks/gpu_wheels.py): its comparison logic against pip's
resolution, and the committed list against a recorded resolution (the live check needs the network: a developer
command, `python benchmarks/gpu_wheels.py check --save-report tests/gpu/gpu_resolution.json`)."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_wheels  # noqa: E402

RECORDED = json.loads((Path(__file__).parent / "gpu_resolution.json").read_text())


def _report(*pins):
    """A `pip install --dry-run --report` JSON as pip 23 writes it (only the fields read)."""
    return {"version": "1", "pip_version": "23.2.1", "install": [
        {"download_info": {"url": f"https://files/{n}-{v}-py3-none-any.whl"}, "is_direct": False,
         "requested": True, "metadata": {"metadata_version": "2.1", "name": n, "version": v}} for n, v in pins]}


def test_report_pins_normalise_names():
    pins = gpu_wheels.report_pins(_report(("Jinja2", "3.1.6"), ("typing_extensions", "4.16.0"), ("tomli-w", "1.2")))
    assert pins == {"jinja2": "3.1.6", "typing-extensions": "4.16.0", "tomli-w": "1.2"}


def test_compare_names_every_kind_of_difference():
    has = gpu_wheels.report_pins(_report(("torch", "2.11.0"), ("filelock", "4.3.1"), ("numpy", "2.4.6")))
    resolved = gpu_wheels.report_pins(_report(("torch", "2.11.0"), ("filelock", "4.2.0"), ("numpy", "2.4.6"),
                                              ("timm", "1.0.31"), ("scipy", "1.17.1"), ("faiss-cpu", "1.15.1")))
    listed = gpu_wheels.parse_pins("timm==1.0.30\nfaiss_cpu==1.15.1  # comment\nnumpy==2.4.6\n\n# only a comment\n")
    assert gpu_wheels.compare(listed, resolved, has) == [
        "missing: scipy==1.17.1",
        "wrong version: timm==1.0.30 listed, 1.0.31 needed",
        "not needed: numpy==2.4.6 (the machine has it, or nothing requires it)",
        "clash: the machine has filelock 4.3.1, the pinned set resolved 4.2.0",
    ]
    exact = {"timm": "1.0.31", "scipy": "1.17.1", "faiss-cpu": "1.15.1"}
    assert gpu_wheels.compare(exact, {**resolved, "filelock": "4.3.1"}, has) == []


@pytest.mark.parametrize("text", ["timm>=1.0\n", "timm\n", "timm==\n", "timm==1\nTimm==2\n"])
def test_parse_pins_refuses_what_is_not_one_exact_pin(text):
    with pytest.raises(ValueError, match="line"):
        gpu_wheels.parse_pins(text)


def test_gpu_constraints_take_the_machines_versions_and_the_torchvision_for_its_torch():
    adjusted = gpu_wheels.gpu_constraints({"torch": "2.14.1", "torchvision": "0.29.1", "filelock": "4.2.12",
                                           "timm": "1.0.31"}, {"torch": "2.11.0", "filelock": "4.3.1"},
                                          {"torchvision": "0.26.0"})
    assert adjusted == {"torch": "2.11.0", "torchvision": "0.26.0", "filelock": "4.3.1", "timm": "1.0.31"}


def test_source_only_packages_are_resolved_through_their_requirements():
    reqs = gpu_wheels.binary_requirements(["nflows>=0.14", "timm>=1.0"])
    assert "timm>=1.0" in reqs and not any(r.startswith("nflows") for r in reqs)
    assert set(gpu_wheels.SDIST_ONLY["nflows"]) <= set(reqs)


def test_the_requirements_are_dmlplugs_dependencies_export_extra_and_pytest():
    names = {gpu_wheels._requirement_name(r) for r in gpu_wheels.requirements()}
    assert {"torch", "torchvision", "faiss-cpu", "pytorch-metric-learning", "onnxruntime", "pytest"} <= names
    assert not names & {"mlflow", "mypy", "ruff"}  # dev-only tools the GPU check does not need


def test_the_committed_list_matches_the_recorded_resolution():
    listed = gpu_wheels.parse_pins(gpu_wheels.LIST.read_text())
    assert gpu_wheels.compare(listed, RECORDED["resolved"], RECORDED["has"]) == []
    assert listed["torchvision"] == "0.26.0" and RECORDED["has"]["torch"] == "2.11.0"


def test_the_recorded_resolution_follows_constraints_txt():
    # Stale after a change of constraints.txt: rerun the live check with --save-report (module docstring).
    pins = gpu_wheels.parse_pins(gpu_wheels.CONSTRAINTS.read_text())
    own = {n: v for n, v in RECORDED["resolved"].items() if n not in RECORDED["has"] and n not in gpu_wheels.GPU_PINS}
    assert {n: pins.get(n) for n in own} == own


def test_what_travels_leaves_out_the_image_and_keeps_what_it_lacks():
    listed = gpu_wheels.parse_pins(gpu_wheels.LIST.read_text())
    image = gpu_wheels.image_names(gpu_wheels.IMAGE.read_text())
    travels = gpu_wheels.carried(listed, image)
    assert {"faiss-cpu", "pytorch-metric-learning", "nflows", "pydantic"} <= set(travels)
    assert "scipy" in image and "scipy" not in travels
    assert gpu_wheels.image_names("# c\nScikit_Learn\n\n") == {"scikit-learn"}

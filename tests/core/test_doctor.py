"""`dmlplug doctor`: every check present, missing packages and broken plugins reported with a fix."""

from __future__ import annotations

import importlib.util
import json
from importlib import metadata

from e2e import broken_plugin_site, run_cli

from dmlplug.doctor import diagnose, render


def test_reports_every_component_of_the_installation():
    checks = {c.name: c for c in diagnose()}
    for name in ("python", "dmlplug", "torch", "torchvision", "cuda", "faiss", "pytorch-metric-learning", "timm",
                 "tensorboard", "record-keeper", "onnx", "onnxruntime", "built-in plugins"):
        assert name in checks, name
    assert all(c.status in ("ok", "warn", "fail") for c in checks.values())
    import torch

    assert torch.__version__ in checks["torch"].detail
    assert checks["cuda"].status == ("ok" if torch.cuda.is_available() else "warn")
    assert ("GPU build" in checks["faiss"].detail) or ("CPU build" in checks["faiss"].detail)


def test_missing_logger_package_is_a_warning_with_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "record_keeper" else real(name, *a))
    check = next(c for c in diagnose() if c.name == "record-keeper")
    assert check.status == "warn" and check.fix == "pip install record-keeper"
    assert "fix: pip install record-keeper" in render(diagnose())


def test_broken_plugin_fails_the_doctor(tmp_path):
    # A distribution on the path whose `dmlplug` entry point cannot be imported.
    site = broken_plugin_site(tmp_path / "site", dist="broken-probe", module="broken_probe", entry="broken_probe",
                              body="raise ImportError('needs a library that is not installed')\n")
    proc = run_cli("doctor", env={"PYTHONPATH": str(site)})
    assert proc.returncode == 1
    assert "plugin broken_probe" in proc.stdout and "needs a library that is not installed" in proc.stdout
    assert "DMLPLUG_DISABLE_PLUGINS=broken_probe" in proc.stdout
    ok = run_cli("doctor", "--json", env={"PYTHONPATH": str(site), "DMLPLUG_DISABLE_PLUGINS": "broken_probe"})
    rows = json.loads(ok.stdout)
    assert not [r for r in rows if r["status"] == "fail"], rows
    assert ok.returncode == 0


def test_unsupported_pml_major_version_fails_with_the_install_command(monkeypatch):
    from dmlplug import doctor

    assert next(c for c in diagnose() if c.name == "pytorch-metric-learning").status == "ok"
    real = doctor.installed_version
    monkeypatch.setattr(doctor, "installed_version",
                        lambda dist: "3.0.1" if dist == "pytorch-metric-learning" else real(dist))
    check = next(c for c in diagnose() if c.name == "pytorch-metric-learning")
    assert check.status == "fail" and "3.0.1" in check.detail and "<3" in check.fix


# ------------------------------------------------------------------------------------------------ onnx (bundles)


def test_onnx_packages_are_checked_with_their_versions():
    from importlib import metadata

    checks = {c.name: c for c in diagnose()}
    for dist in ("onnx", "onnxruntime"):
        assert checks[dist].status == "ok" and checks[dist].detail == metadata.version(dist)


def test_missing_onnxruntime_is_a_warning_with_the_export_extra(monkeypatch):
    from dmlplug.bundle.errors import ONNX_INSTALL

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    check = next(c for c in diagnose() if c.name == "onnxruntime")
    assert check.status == "warn" and "not installed" in check.detail and check.fix == ONNX_INSTALL


def test_onnx_that_fails_to_import_fails_the_doctor(monkeypatch):
    import importlib

    real = importlib.import_module

    def broken(name, *args):
        if name == "onnx":
            raise ImportError("libonnx.so: cannot open shared object file")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", broken)
    check = next(c for c in diagnose() if c.name == "onnx")
    assert check.status == "fail" and "libonnx.so" in check.detail and check.fix == "pip install -U onnx"


def test_onnxruntime_older_than_the_export_extra_is_a_warning(monkeypatch):
    from dmlplug import doctor

    real = doctor.installed_version
    monkeypatch.setattr(doctor, "installed_version", lambda dist: "1.17.3" if dist == "onnxruntime" else real(dist))
    check = next(c for c in diagnose() if c.name == "onnxruntime")
    assert check.status == "warn" and "older than 1.18" in check.detail and "onnxruntime>=1.18" in check.fix


def test_the_onnx_minimums_are_the_export_extra_of_pyproject():
    import re
    import tomllib
    from pathlib import Path

    from dmlplug.doctor import EXPORT_PACKAGES

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    pins = dict(re.fullmatch(r"([\w-]+)>=([\d.]+)", pin).groups()
                for pin in pyproject["project"]["optional-dependencies"]["export"])
    assert pins == EXPORT_PACKAGES


def _fake_nvidia_distribution(site, name, sizes):
    """A dist-info with a RECORD naming files of the given sizes (one of them missing on disk)."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = []
    for i, size in enumerate(sizes):
        path = site / name / f"lib{i}.so"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"\0" * size)
        lines.append(f"{name}/lib{i}.so,,{size}")
    lines.append(f"{name}/deleted.so,,99")
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    return metadata.PathDistribution(info)


def test_cuda_build_without_a_gpu_reports_the_size_of_the_cuda_libraries_and_the_cpu_route(monkeypatch, tmp_path):
    import torch

    from dmlplug import doctor

    fakes = [_fake_nvidia_distribution(tmp_path, "nvidia-cublas", [1000, 24]),
             _fake_nvidia_distribution(tmp_path, "nvidia-cudnn-cu13", [2048])]
    other = _fake_nvidia_distribution(tmp_path / "other", "not-nvidia", [4096])
    monkeypatch.setattr(metadata, "distributions", lambda: iter([*fakes, other]))
    assert doctor.cuda_wheel_sizes() == {"nvidia-cublas": 1024, "nvidia-cudnn-cu13": 2048}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(doctor, "cuda_wheel_sizes", lambda: {"nvidia-cublas": 3 * 2**30, "nvidia-cudnn": 2**29})
    check = next(c for c in diagnose() if c.name == "cuda build")
    assert check.status == "warn"  # informational: everything works, on the CPU
    assert "CUDA build on a machine without a GPU" in check.detail
    assert "3.5 GiB (2 nvidia-* packages)" in check.detail
    assert "docs/install.md" in check.fix and "download.pytorch.org/whl/cpu" in check.fix
    assert "fix: CPU-only install: docs/install.md" in render(diagnose())


def test_no_cuda_build_check_for_a_cpu_build_or_with_a_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "cuda build" not in {c.name for c in diagnose()}
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # no GPU properties to read
    assert "cuda build" not in {c.name for c in diagnose()}

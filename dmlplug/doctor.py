"""``dmlplug doctor``: what this installation can do, and what is broken, in one screen.

Checks torch (and that torchvision matches it), CUDA and the GPUs (and, on a machine without one, how much
space a CUDA build of torch costs, with the CPU-only route), the faiss flavour (CPU or GPU build),
pytorch-metric-learning, timm, TensorBoard and record-keeper, onnx and onnxruntime (bundles), every plugin with
its load error, and every component name that two plugins register.
Each check is ``ok``, ``warn`` (works, with a limitation) or ``fail`` (something a recipe may need is
broken); the command exits with status 1 when any check fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import re
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from dmlplug.distributions import installed_version


@dataclass
class Check:
    """One line of the diagnosis."""

    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text[:200]


def _torch_checks() -> list[Check]:
    checks = []
    try:
        import torch
    except Exception as exc:
        return [Check("torch", "fail", f"cannot import torch ({_short(exc)})",
                      "pip install -e . (torch and torchvision are pinned together in pyproject.toml)")]
    checks.append(Check("torch", "ok", f"{torch.__version__} (built for CUDA {torch.version.cuda or 'none'})"))
    try:
        import torchvision

        checks.append(Check("torchvision", "ok", torchvision.__version__))
    except Exception as exc:
        checks.append(Check("torchvision", "fail", f"cannot import ({_short(exc)})",
                            "install the torchvision build that matches torch (see pyproject.toml)"))
    if torch.cuda.is_available():
        gpus = [f"{i}: {torch.cuda.get_device_name(i)} "
                f"({torch.cuda.get_device_properties(i).total_memory / 2**30:.0f} GiB)"
                for i in range(torch.cuda.device_count())]
        checks.append(Check("cuda", "ok", f"{len(gpus)} GPU(s): " + "; ".join(gpus)))
    else:
        fix = ("torch is a CUDA build: check the NVIDIA driver and CUDA_VISIBLE_DEVICES" if torch.version.cuda
               else "on a GPU machine, install a CUDA build of torch")
        checks.append(Check("cuda", "warn", "no usable GPU: runs use the CPU (device = \"auto\" picks it)", fix))
        if torch.version.cuda:
            checks.append(_cuda_build_size_check())
    return checks


#: Where the CPU-only install is described (the README's command installs the CUDA build everywhere).
CPU_ONLY_ROUTE = "CPU-only install: docs/install.md (torch and torchvision from https://download.pytorch.org/whl/cpu)"


def _installed_size(dist: metadata.Distribution) -> int:
    """Bytes of the files a distribution installed (its RECORD), files already gone counted as 0."""
    total = 0
    for file in dist.files or []:
        try:
            total += Path(str(dist.locate_file(file))).stat().st_size
        except OSError:
            continue
    return total


def cuda_wheel_sizes() -> dict[str, int]:
    """Installed size in bytes of every ``nvidia-*`` distribution (the CUDA libraries a CUDA torch pulls in)."""
    sizes: dict[str, int] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().startswith("nvidia-") and name not in sizes:
            sizes[name] = _installed_size(dist)
    return sizes


def _cuda_build_size_check() -> Check:
    """Informational, on a machine without a GPU: the CUDA build of torch works, but its libraries are large."""
    sizes = cuda_wheel_sizes()
    detail = "torch is a CUDA build on a machine without a GPU (it runs on the CPU)"
    if sizes:
        detail += (f"; the CUDA libraries installed with it take {sum(sizes.values()) / 2**30:.1f} GiB "
                   f"({len(sizes)} nvidia-* packages)")
    return Check("cuda build", "warn", detail, CPU_ONLY_ROUTE)


def _faiss_check() -> Check:
    try:
        import faiss
    except Exception as exc:
        return Check("faiss", "warn", f"not importable ({_short(exc)}); the pure-torch kNN backend is used",
                     "pip install faiss-cpu (or faiss-gpu-cu12 on a GPU machine)")
    version = getattr(faiss, "__version__", "unknown")
    if hasattr(faiss, "StandardGpuResources"):
        gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        return Check("faiss", "ok", f"{version}, GPU build ({gpus} GPU(s) visible to faiss)")
    return Check("faiss", "ok", f"{version}, CPU build (GPU kNN uses the torch backend)")


def _package_check(name: str, module: str, dist: str, purpose: str, required: bool,
                   install: str | None = None, minimum: str | None = None) -> Check:
    """Installed, importable, and (with ``minimum``) at least that version; ``install`` is the command to fix it."""
    install = install or f"pip install {dist}"
    if importlib.util.find_spec(module) is None:
        return Check(name, "fail" if required else "warn", f"not installed ({purpose} unavailable)", install)
    try:
        importlib.import_module(module)
    except Exception as exc:
        return Check(name, "fail", f"installed but fails to import ({_short(exc)})", f"pip install -U {dist}")
    version = installed_version(dist)
    if minimum and version and _release(version) < _release(minimum):
        return Check(name, "fail" if required else "warn", f"{version}: older than {minimum}, the oldest "
                     f"supported ({purpose} may fail)", f"pip install -U '{dist}>={minimum}'")
    return Check(name, "ok", version or "installed")


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version (``"1.18.0rc1"`` -> ``(1, 18, 0)``), enough to compare with a minimum."""
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


#: The ``export`` extra of pyproject.toml (ONNX bundles, docs/bundle.md): distribution -> oldest supported version.
EXPORT_PACKAGES = {"onnx": "1.16", "onnxruntime": "1.18"}


def _onnx_checks() -> list[Check]:
    """The ONNX packages of bundles: ``onnx`` writes ``model.onnx``, ``onnxruntime`` runs it (embed, search)."""
    from dmlplug.bundle.errors import ONNX_INSTALL

    purposes = {"onnx": "ONNX export of bundles", "onnxruntime": "running ONNX bundles"}
    return [_package_check(dist, dist, dist, purposes[dist], required=False, install=ONNX_INSTALL,
                           minimum=minimum) for dist, minimum in EXPORT_PACKAGES.items()]


#: The pytorch-metric-learning major versions the built-in adapters are written and tested for.
SUPPORTED_PML_MAJORS = (2,)


def _pml_check() -> Check:
    """PML installed and importable, and of a major version the adapters support (3.0 changed the API)."""
    check = _package_check("pytorch-metric-learning", "pytorch_metric_learning", "pytorch-metric-learning",
                           "losses and miners", required=True)
    version = installed_version("pytorch-metric-learning")
    major = version.split(".", 1)[0] if version else ""
    if check.status == "ok" and major.isdigit() and int(major) not in SUPPORTED_PML_MAJORS:
        return Check(check.name, "fail", f"{version}: major version {major} is not supported (the built-in PML "
                     "adapters are written for 2.x; 3.0 changed losses, miners, samplers and defaults)",
                     "pip install 'pytorch-metric-learning>=2.6,<3'")
    return check


def _plugin_checks(host: Any) -> list[Check]:
    checks = []
    for record in host.records.values():
        origin = "built-in" if record.builtin else f"{record.distribution} {record.version}".strip()
        if record.error:
            checks.append(Check(f"plugin {record.name}", "fail", f"{origin}: LOAD ERROR: {record.error}",
                                f"fix or uninstall {record.distribution or record.module}; "
                                f"or set DMLPLUG_DISABLE_PLUGINS={record.name}"))
        elif record.load_note:
            checks.append(Check(f"plugin {record.name}", "warn", f"{origin}: {record.load_note}",
                                f"remove {record.name} from DMLPLUG_DISABLE_PLUGINS"))
        elif not record.builtin:
            checks.append(Check(f"plugin {record.name}", "ok", f"{origin}: {', '.join(record.hooks)}"))
    builtins = [r for r in host.records.values() if r.builtin and not r.error]
    checks.insert(0, Check("built-in plugins", "ok", f"{len(builtins)} loaded"))
    return checks + _clash_checks(host)


def _clash_checks(host: Any) -> list[Check]:
    # A name two plugins register: every recipe that names it fails (the rest of both plugins works).
    from dmlplug.registry import singular

    checks = []
    for kind, key, _ in host.registry.clash_list():
        error = host.registry.clash_error(kind, key)
        checks.append(Check(f"{singular(kind)} {key!r}", "fail", f"name clash: {error.what}", error.fix or ""))
    return checks


def diagnose(host: Any = None) -> list[Check]:
    """Run every check (imports torch, faiss and the logger packages)."""
    from dmlplug.distributions import DMLPLUG_VERSION

    checks = [Check("python", "ok", f"{platform.python_version()} ({sys.executable})"),
              Check("dmlplug", "ok", DMLPLUG_VERSION)]
    checks += _torch_checks()
    checks.append(_faiss_check())
    checks.append(_pml_check())
    checks.append(_package_check("timm", "timm", "timm", "backbones", required=True))
    checks.append(_package_check("tensorboard", "tensorboard", "tensorboard", "the tensorboard logger",
                                 required=False))
    checks.append(_package_check("record-keeper", "record_keeper", "record-keeper", "the record_keeper logger",
                                 required=False))
    checks += _onnx_checks()
    if host is None:
        from dmlplug.plugins import get_host

        host = get_host()
    checks += _plugin_checks(host)
    return checks


def render(checks: list[Check]) -> str:
    """The checks as aligned text lines, with the fix under each problem."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
        if c.fix and c.status != "ok":
            lines.append(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    lines.append(f"{failed} problem(s), {warned} warning(s)")
    return "\n".join(lines)


def as_json(checks: list[Check]) -> list[dict[str, str]]:
    """JSON-ready checks."""
    return [asdict(c) for c in checks]

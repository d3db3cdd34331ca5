"""The plugin manager: built-ins and third-party plugins, each loaded in isolation.

Built-in plugins are listed in :data:`DEFAULT_PLUGINS` and loaded exactly like third-party ones,
which come from the ``dmlplug`` entry-point group. A plugin that fails to import, or whose
registration hook raises, is recorded in :attr:`PluginHost.load_errors`: ``dmlplug plugins`` shows
it, the CLI keeps working, and a recipe that needs one of its components fails with a message that
names it.

Environment:
    DMLPLUG_LOAD_PLUGINS: comma-separated entry-point names; when set, only these third-party
        plugins are loaded (built-ins always are).
    DMLPLUG_DISABLE_PLUGINS: comma-separated plugin names (built-in or third-party) not to load; the
        :data:`ESSENTIAL_PLUGINS` cannot be disabled.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from dmlplug import hookspecs
from dmlplug.distributions import installed_version
from dmlplug.protocols.kinds import KINDS
from dmlplug.registry import Registry

ENTRY_POINT_GROUP = "dmlplug"

#: Built-in plugin modules; they use only the public hooks.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "dmlplug_builtins.backbones",
    "dmlplug_builtins.heads",
    "dmlplug_builtins.pml",
    "dmlplug_builtins.revisiting",
    "dmlplug_builtins.samplers",
    "dmlplug_builtins.evaluators",
    "dmlplug_builtins.datasets",
    "dmlplug_builtins.tcm",
    "dmlplug_builtins.nir",
    "dmlplug_builtins.diva",
    "dmlplug_builtins.s2sd",
    "dmlplug_builtins.loggers",
    "dmlplug_builtins.oodml",
    "dmlplug_builtins.optim",
    "dmlplug_builtins.augmentations",
    "dmlplug_builtins.tune",
    "dmlplug_builtins.rerank",
    "dmlplug_builtins.codecs",
    "dmlplug_builtins.serve",
)

#: Built-ins that the recipe defaults name (``[head] name = "linear"``, ``[data.sampler] m_per_class``, the
#: default evaluators and loggers, ``[optimizer] name = "adam"`` and ``[scheduler] name = "none"``, the datasets'
#: default augmentation, ``dmlplug index``'s default codec ``float32``): like pytest's essential plugins they
#: cannot be disabled, so no default names a component that is not there.
ESSENTIAL_PLUGINS: frozenset[str] = frozenset({"heads", "samplers", "evaluators", "loggers", "optim",
                                               "augmentations", "codecs"})


@dataclass
class PluginRecord:
    """What ``dmlplug plugins`` shows for one plugin."""

    name: str
    module: str
    distribution: str = ""
    version: str = ""
    builtin: bool = False
    hooks: list[str] = field(default_factory=list)
    error: str | None = None
    #: What ``dmlplug plugins`` says about a plugin that works: :attr:`load_note` and :attr:`clashes`, joined.
    note: str | None = None
    #: Why the plugin was loaded against ``DMLPLUG_DISABLE_PLUGINS`` (an essential plugin).
    load_note: str | None = None
    #: One sentence per name this plugin registers that another plugin registers too (recipes naming it fail).
    clashes: list[str] = field(default_factory=list)


class PluginHost:
    """Owns the pluggy manager, the component registry and the load report."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("dmlplug")
        self.pm.add_hookspecs(hookspecs)
        self.registry = Registry()
        self.records: dict[str, PluginRecord] = {}

    @property
    def load_errors(self) -> dict[str, str]:
        """Plugin name -> error message, for plugins that failed to load or register."""
        return {n: r.error for n, r in self.records.items() if r.error}

    def load(self, *, builtins: bool = True, entry_points: bool = True) -> PluginHost:
        """Load built-ins and entry-point plugins, then fill the registry.

        An essential plugin named in ``DMLPLUG_DISABLE_PLUGINS`` is loaded all the same; its record's ``note``
        says so (``dmlplug plugins`` and ``dmlplug doctor`` show it), and every command keeps working.
        """
        disabled = _env_list("DMLPLUG_DISABLE_PLUGINS")
        if builtins:
            # Read once: each metadata lookup scans sys.path, a millisecond apiece for nineteen built-ins.
            version = installed_version("dmlplug") or ""
            for module_name in DEFAULT_PLUGINS:
                name = module_name.rsplit(".", 1)[-1]
                asked_off = name in disabled or module_name in disabled
                if asked_off and name not in ESSENTIAL_PLUGINS:
                    continue
                record = PluginRecord(name=name, module=module_name, builtin=True,
                                      distribution="dmlplug", version=version)
                if asked_off:
                    record.load_note = ("essential (the recipe defaults name its components): "
                                        "DMLPLUG_DISABLE_PLUGINS cannot disable it; remove it from that variable")
                self._import_and_register(record, lambda m=module_name: _import(m))
        if entry_points:
            only = _env_list("DMLPLUG_LOAD_PLUGINS")
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
                if ep.name in disabled or (only and ep.name not in only):
                    continue
                dist = ep.dist.name if ep.dist is not None else ""
                record = PluginRecord(name=ep.name, module=ep.value, distribution=dist,
                                      version=ep.dist.version if ep.dist is not None else "")
                self._import_and_register(record, ep.load)
        self.fill_registry()
        return self

    def add_plugin(self, plugin: ModuleType | Any, name: str) -> None:
        """Register an already imported plugin object (tests, notebooks) and re-fill the registry."""
        record = PluginRecord(name=name, module=getattr(plugin, "__name__", repr(plugin)))
        self._import_and_register(record, lambda: plugin)
        self.fill_registry()

    def _import_and_register(self, record: PluginRecord, loader: Any) -> None:
        self.records[record.name] = record
        if record.name in (n for n, _ in self.pm.list_name_plugin()):
            record.error = f"a plugin named {record.name!r} is already loaded"
            return
        try:
            plugin = loader()
            self.pm.register(plugin, name=record.name)
        except Exception as exc:  # a broken plugin must not take the host down
            record.error = _short_error(exc)
            return
        record.hooks = sorted(
            hook.name for hook in self.pm.get_hookcallers(plugin) or [] if hook.name.startswith(("register", "on_"))
        )
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self.pm.unregister(plugin)
            record.error = f"implements an unknown hook: {exc}"

    def fill_registry(self) -> None:
        """(Re)build the registry by calling every plugin's registration hooks, one plugin at a time.

        Nothing a plugin registers stops the others or any command: an invalid registration (params that are no
        ``Params`` model) is that plugin's load error, and a name two plugins register is a clash, noted on
        both records and refused only to the recipes that name it (:meth:`Registry.clash_error`).
        """
        self.registry = Registry(origins={name: _origin(r) for name, r in self.records.items()},
                                 essential=ESSENTIAL_PLUGINS)
        for kind in KINDS:
            def arguments(plugin: str, kind: str = kind) -> dict[str, Any]:
                return {"register": self.registry.register_callback(kind, plugin)}

            self.call_each(f"register_{kind}", arguments)
        self.registry.load_errors = self.load_errors
        self._note_clashes()

    def _note_clashes(self) -> None:
        for record in self.records.values():
            record.clashes = []
        for kind, key, infos in self.registry.clash_list():
            error = self.registry.clash_error(kind, key)
            for plugin in dict.fromkeys(info.plugin for info in infos):
                if plugin in self.records:
                    self.records[plugin].clashes.append(f"CLASH: {error.what}; fix: {error.fix}")
        for record in self.records.values():
            record.note = "; ".join(n for n in (record.load_note, *record.clashes) if n) or None

    def call_each(self, hook: str, arguments: Callable[[str], dict[str, Any]],
                  reraise: tuple[type[BaseException], ...] = (),
                  on_error: Callable[[str, Exception], Any] | None = None) -> list[tuple[str, Any]]:
        """Call every implementation of ``hook`` alone, so that one broken plugin cannot stop the others.

        pluggy calls all implementations in one go and stops at the first exception; registration,
        command and report hooks are instead called one plugin at a time, ``tryfirst`` implementations first,
        then in registration order (the reverse of pluggy's, so built-ins come first and a duplicate name is
        blamed on the later plugin), ``trylast`` ones last; and a
        plugin whose implementation raises gets the error recorded (``dmlplug plugins`` shows it).
        Plugins that already failed to load are skipped; hook wrappers, which only make sense around the
        others, are not called.

        Args:
            hook: The hook's name (``"register_losses"``, ``"register_commands"`` …).
            arguments: ``plugin name -> keyword arguments`` of its call.
            reraise: Exception types that propagate instead of being recorded.
            on_error: ``(plugin name, exception) -> result`` used in place of a failed implementation's
                result (a report section saying so); without it the failure is recorded on the plugin.

        Returns:
            ``(plugin name, result)`` of each implementation, in registration order.
        """
        results = []
        impls = getattr(self.pm.hook, hook).get_hookimpls()
        # pluggy keeps tryfirst implementations last in this list (it calls from the end): put them first.
        for impl in sorted(impls, key=lambda i: 0 if i.tryfirst else 2 if i.trylast else 1):
            record = self.records.get(impl.plugin_name)
            if (record is not None and record.error) or impl.hookwrapper or impl.wrapper:
                continue
            given = arguments(impl.plugin_name)
            try:
                results.append((impl.plugin_name, impl.function(**{a: given[a] for a in impl.argnames})))
            except reraise:
                raise
            except Exception as exc:
                if on_error is not None:
                    results.append((impl.plugin_name, on_error(impl.plugin_name, exc)))
                    continue
                if record is None:
                    raise  # not a loaded plugin (the core commands): a bug of dmlplug itself
                record.error = f"{hook} failed: {_short_error(exc)}"
        return results

    def register_run_plugin(self, obj: Any, name: str) -> None:
        """Register a per-run object (a logger) that implements lifecycle hooks."""
        self.pm.register(obj, name=name)

    def unregister_run_plugin(self, name: str) -> None:
        """Remove a per-run object registered with :meth:`register_run_plugin`."""
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin)


_HOST: PluginHost | None = None


def get_host(*, reload: bool = False) -> PluginHost:
    """The process-wide plugin host, loaded on first use."""
    global _HOST
    if _HOST is None or reload:
        _HOST = PluginHost().load()
    return _HOST


def _import(module: str) -> ModuleType:
    # The import statement's machinery, not importlib.import_module: only the former is timed by `python -X
    # importtime`, which is how a built-in that makes start-up slow is found (benchmarks/startup.py --importtime).
    __import__(module)
    return sys.modules[module]


def _origin(record: PluginRecord) -> str:
    # "dmlplug-x 1.0" or "dmlplug 0.1.0, built-in": how messages name where a plugin comes from.
    origin = f"{record.distribution} {record.version}".strip()
    return f"{origin}, built-in" if record.builtin else origin


def _env_list(var: str) -> set[str]:
    return {p.strip() for p in os.environ.get(var, "").split(",") if p.strip()}


def _short_error(exc: BaseException) -> str:
    """``Type: message`` plus the innermost frame, enough to find the fault without a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{at}"

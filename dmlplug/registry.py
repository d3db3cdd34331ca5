"""The component registry: name -> :class:`ComponentInfo`, one table per kind.

Plugins fill it through the ``register_*`` hooks; recipes and :func:`dmlplug.create` read it; the listing
helpers at the end are what ``dmlplug list`` shows (registry kinds and the nested distances and reducers).
The registry is plain data: it never imports torch and never builds anything by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol

from pydantic import ValidationError

from dmlplug.errors import ComponentError, PluginError, RecipeError, did_you_mean
from dmlplug.params import NoParams, Params
from dmlplug.protocols.components import Factory
from dmlplug.protocols.kinds import KIND_PROTOCOLS, KIND_TABLE, KINDS

if TYPE_CHECKING:
    from dmlplug.context import BuildContext

#: Component kinds, in the order they are listed; each has a ``register_<kind>`` hook (the table is
#: :data:`dmlplug.protocols.kinds.KIND_TABLE`).
_SINGULAR = {kind.singular: kind.name for kind in KIND_TABLE}


def normalize_kind(kind: str) -> str:
    """Return the plural kind for ``kind`` (``"loss"`` and ``"losses"`` both give ``"losses"``).

    Raises:
        ComponentError: ``kind`` is not a component kind.
    """
    if kind in KINDS:
        return kind
    if kind in _SINGULAR:
        return _SINGULAR[kind]
    raise ComponentError(
        f"unknown component kind {kind!r}{did_you_mean(kind, [*KINDS, *_SINGULAR])}",
        fix="kinds are: " + ", ".join(KINDS),
    )


def singular(kind: str) -> str:
    """The singular noun of a kind, for messages ("loss", "miner" ...)."""
    kind = normalize_kind(kind)
    return next(k.singular for k in KIND_TABLE if k.name == kind)


#: What ``register(..., params=...)`` takes: a Params subclass, or a function of no arguments returning one.
ParamsSource = type[Params] | Callable[[], type[Params]]
_SOURCE = "_params_source"  # where ComponentInfo keeps what it was given as params


class _DeferredParams:
    """The ``params`` field of :class:`ComponentInfo`: a model given as a function is made on first read.

    A plugin that generates many models (the PML adapter makes one per PML class) would otherwise build them all
    at every start-up of the host, while a command reads a handful. The function is called once; what it returns
    is checked and kept, and anything else it does (raise, return no ``Params``) is that plugin's error.
    """

    def __get__(self, info: ComponentInfo | None, owner: type | None = None) -> type[Params]:
        if info is None:
            return NoParams  # the dataclass field's default
        source = info.__dict__[_SOURCE]
        if isinstance(source, type):
            return source
        try:
            model = source()
        except Exception as exc:
            raise PluginError(f"{singular(info.kind)} {info.name!r}: its params function failed: "
                              f"{type(exc).__name__}: {exc}", where=f"plugin {info.plugin!r}",
                              fix="report this to the plugin's author") from exc
        if not (isinstance(model, type) and issubclass(model, Params)):
            raise PluginError(f"{singular(info.kind)} {info.name!r}: its params function returned {model!r}, "
                              "not a subclass of dmlplug.Params", where=f"plugin {info.plugin!r}",
                              fix="report this to the plugin's author")
        info.__dict__[_SOURCE] = model
        return model

    def __set__(self, info: ComponentInfo, source: ParamsSource) -> None:
        info.__dict__[_SOURCE] = source

    @staticmethod
    def is_valid_source(info: ComponentInfo) -> bool:
        """Whether ``info`` was given a Params subclass or a function (which is not called here)."""
        source = info.__dict__[_SOURCE]
        return issubclass(source, Params) if isinstance(source, type) else callable(source)


@dataclass(frozen=True)
class ComponentInfo:
    """Everything the host knows about one registered component.

    Attributes:
        kind: Plural component kind (``"losses"`` ...).
        name: Registered name used in recipes.
        factory: ``factory(params, ctx)`` that builds the component.
        params: The :class:`~dmlplug.params.Params` subclass describing its parameters (given as a function,
            it is made the first time it is read).
        description: One-line description shown by ``dmlplug list``.
        plugin: Name of the plugin that registered it.
        aliases: Other names that resolve to this component.
        tags: Capabilities the component offers, checked by ``dmlplug validate``. Vocabulary:
            losses: ``"proxies"`` (has class proxies, see :func:`dmlplug.proxies.class_proxies`),
            ``"uses_tuples"`` (consumes a miner's ``indices_tuple``), ``"needs_num_classes"``,
            ``"has_parameters"``; miners: ``"pairs"`` or ``"triplets"``.
        requires: Capabilities the component needs from the rest of the recipe, as
            ``"<section>:<tag>"`` (e.g. ``"loss:proxies"``) or engine services: ``"features"``,
            ``"feature_map"``, ``"views:2"``, ``"ema"``, ``"named_embeddings"``.
    """

    kind: str
    name: str
    factory: Factory[Any]
    params: _DeferredParams = _DeferredParams()
    description: str = ""
    plugin: str = ""
    aliases: tuple[str, ...] = ()
    tags: frozenset[str] = frozenset()
    requires: frozenset[str] = frozenset()

    def validate(self, raw: dict[str, Any] | None, where: str, *, registry: Registry | None = None) -> Params:
        """Validate raw recipe values into this component's params.

        ``registry`` reaches the params model as pydantic validation context, ``{"registry": registry}``, so
        that nested :class:`dmlplug.ComponentTable` fields resolve their names in the same registry as the
        outer component rather than in the process-wide plugin host.

        Args:
            raw: The values from the recipe (without the ``name`` key).
            where: Recipe path used in error messages, e.g. ``"loss"`` or ``"regularizers[0]"``.
            registry: The registry the surrounding recipe is resolved in; passed on, never looked up here.

        Raises:
            RecipeError: A key is unknown, has the wrong type or is out of range.
        """
        try:
            return self.params.model_validate(raw or {}, context={"registry": registry})
        except ValidationError as exc:
            raise RecipeError(
                f"invalid parameters for {singular(self.kind)} {self.name!r}:\n"
                + format_validation_error(exc, where, self.params),
                where=where,
                fix=f"see `dmlplug list {self.kind} --params` for the parameters of {self.name!r}",
            ) from None

    @property
    def label(self) -> str:
        """``"loss 'margin' (plugin 'revisiting')"``: how messages name this component."""
        return f"{singular(self.kind)} {self.name!r} (plugin {self.plugin!r})"

    def build(self, params: Params, ctx: BuildContext) -> Any:
        """Call the factory, then check the result against its kind's Protocol.

        The factory sees ``ctx`` with :attr:`~dmlplug.context.BuildContext.building` naming this component,
        so :meth:`~dmlplug.context.BuildContext.require` errors say who needed the field.

        Raises:
            ComponentError: The built object lacks a member its kind's Protocol requires
                (:data:`dmlplug.protocols.KIND_PROTOCOLS`); the message names the plugin and the members.
        """
        component = self.factory(params, ctx.changed(building=self.label))
        missing = missing_members(component, KIND_PROTOCOLS[self.kind])
        if missing:
            protocol = KIND_PROTOCOLS[self.kind].__name__
            raise ComponentError(
                f"{self.label} built a {type(component).__name__} without "
                + ", ".join(repr(m) for m in missing) + f", which the {protocol} protocol requires",
                where=f"plugin {self.plugin!r}, factory {getattr(self.factory, '__qualname__', self.factory)!r}",
                fix=f"the factory must return an object with every member of dmlplug.protocols.{protocol}; "
                    "report this to the plugin's author",
            )
        return component


def protocol_members(protocol: type) -> list[str]:
    """The members a Protocol requires: its annotated attributes and its methods, in definition order."""
    names: list[str] = []
    for klass in reversed(protocol.__mro__):
        if klass in (object, Protocol, Generic) or not getattr(klass, "_is_protocol", False):
            continue
        names.extend(getattr(klass, "__annotations__", {}))
        names.extend(k for k, v in vars(klass).items() if callable(v) and (not k.startswith("_") or k in _DUNDERS))
    return list(dict.fromkeys(names))


#: Dunder methods that are part of a contract (the others come from ``object`` or ``Protocol``).
_DUNDERS = frozenset({"__call__", "__iter__", "__len__"})


def missing_members(component: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``component`` lacks (empty when it conforms)."""
    return [name for name in protocol_members(protocol) if not _has_member(component, name)]


def _has_member(component: Any, name: str) -> bool:
    # hasattr lets anything but AttributeError escape: a property that fails still names an existing member.
    try:
        getattr(component, name)
    except AttributeError:
        return False
    except Exception:
        return True
    return True


def format_validation_error(exc: ValidationError, where: str, model: type[Params] | None = None) -> str:
    """Render a pydantic error as ``path: message`` lines, suggesting names for unknown keys.

    The one formatter for recipes, component parameters and other validated files.

    Args:
        exc: The pydantic error.
        where: Prefix of every path (``"loss"``), or ``""`` for paths from the top of ``model``.
        model: The validated model; unknown keys get "did you mean" suggestions from the fields of the
            model they appear in (nested ``Params`` sections included).
    """
    lines = []
    for err in exc.errors():
        parts = [str(p) for p in err["loc"]]
        loc = ".".join(parts)
        path = f"{where}.{loc}" if where and loc else (loc or where)
        if err["type"] == "extra_forbidden":
            # Walk down to the Params model that holds the unknown key; elsewhere (dict values, lists)
            # the valid names are not known statically and nothing is suggested.
            holder: type[Params] | None = model
            for part in parts[:-1]:
                field = holder.model_fields.get(part) if holder is not None else None
                annotation = field.annotation if field is not None else None
                holder = annotation if isinstance(annotation, type) and issubclass(annotation, Params) else None
            known = [f.alias or key for key, f in holder.model_fields.items()] if holder is not None else []
            lines.append(f"  {path}: unknown key{did_you_mean(parts[-1] if parts else '', known)}")
        elif err["type"] == "missing":
            lines.append(f"  {path}: missing (required)")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict) else f" (got {got!r})"
            # A validator's ValueError reads "Value error, <message>": the message alone says it all.
            message = err["msg"].removeprefix("Value error, ")
            lines.append(f"  {path}: {message}{shown}")
    return "\n".join(lines)


@dataclass
class Registry:
    """Per-kind tables of :class:`ComponentInfo`, filled by the plugin manager.

    A name (or alias) registered by two components is a *clash*: the installation offers both, and a recipe
    cannot say which one it means. The registry keeps the first one listed, records every claimant in
    :attr:`clashes` and refuses to resolve the name (:meth:`get`), so only what names it fails: every other
    component, and every command, keeps working (``dmlplug plugins`` and ``dmlplug doctor`` report the clash).
    """

    _tables: dict[str, dict[str, ComponentInfo]] = field(default_factory=lambda: {k: {} for k in KINDS})
    _aliases: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})
    #: plugin name -> load error message, consulted to explain unknown names.
    load_errors: dict[str, str] = field(default_factory=dict)
    #: kind -> clashing name or alias -> every component registered under it, in registration order.
    clashes: dict[str, dict[str, list[ComponentInfo]]] = field(default_factory=lambda: {k: {} for k in KINDS})
    #: plugin name -> where it comes from (``"dmlplug-x 1.0"``), filled by the plugin host for messages.
    origins: dict[str, str] = field(default_factory=dict)
    #: Plugins that ``DMLPLUG_DISABLE_PLUGINS`` cannot disable, left out of the fixes suggested for a clash.
    essential: frozenset[str] = frozenset()

    def register_callback(self, kind: str, plugin: str) -> Callable[..., None]:
        """The ``register`` callback handed to ``plugin``'s ``register_<kind>`` hook."""
        kind = normalize_kind(kind)

        def register(
            name: str,
            factory: Factory[Any],
            *,
            params: ParamsSource | None = None,
            description: str | None = None,
            aliases: Iterable[str] = (),
            tags: Iterable[str] = (),
            requires: Iterable[str] = (),
        ) -> None:
            self.add(
                ComponentInfo(
                    kind=kind,
                    name=name,
                    factory=factory,
                    params=params or NoParams,
                    description=(description or _first_doc_line(factory)).strip(),
                    plugin=plugin,
                    aliases=tuple(aliases),
                    tags=frozenset(tags),
                    requires=frozenset(requires),
                )
            )

        return register

    def add(self, info: ComponentInfo) -> None:
        """Add one component; a name or alias already taken becomes a clash (:attr:`clashes`), not an error.

        A component whose own name clashes is reachable under none of its names; one whose alias clashes keeps
        its name and its other aliases.

        Raises:
            PluginError: The params are neither a Params model nor a function, or the factory is not callable.
        """
        if not _DeferredParams.is_valid_source(info):
            raise PluginError(
                f"{singular(info.kind)} {info.name!r}: params must be a subclass of dmlplug.Params "
                "(or a function of no arguments returning one)",
                where=f"plugin {info.plugin!r}",
            )
        if not callable(info.factory):
            raise PluginError(f"{singular(info.kind)} {info.name!r}: factory is not callable",
                              where=f"plugin {info.plugin!r}")
        table, aliases, clashes = self._tables[info.kind], self._aliases[info.kind], self.clashes[info.kind]
        free = []
        for key in (info.name, *info.aliases):
            owner = table[key] if key in table else table[aliases[key]] if key in aliases else None
            if key in clashes:
                clashes[key].append(info)
            elif owner is not None:
                clashes[key] = [owner, info]
            else:
                free.append(key)
        if info.name not in free:
            return  # the aliases map to the name, which is another component's (or nobody's) now
        table[info.name] = info
        for alias in free[1:]:
            aliases[alias] = info.name

    def clash_error(self, kind: str, key: str) -> ComponentError:
        """The error of a name that several plugins register: who registers it, and how to keep one of them."""
        claimants = self.clashes[normalize_kind(kind)][key]
        plugins = list(dict.fromkeys(info.plugin for info in claimants))
        named = " and ".join(f"plugin {p!r}" + (f" ({self.origins[p]})" if self.origins.get(p) else "")
                             for p in plugins)
        what = f"{singular(kind)} name {key!r} is registered by {named}"
        if len(plugins) == 1:
            return ComponentError(what + " twice", where=f"plugin {plugins[0]!r}",
                                  fix=f"report this to the plugin's author; DMLPLUG_DISABLE_PLUGINS={plugins[0]} "
                                      "disables the plugin")
        # Keeping one means disabling the others, which an essential plugin cannot be.
        options = []
        for keep in plugins:
            others = [p for p in plugins if p != keep]
            if not self.essential.intersection(others):
                options.append(f"DMLPLUG_DISABLE_PLUGINS={','.join(others)} to use plugin {keep!r}'s")
        return ComponentError(
            what + ": a recipe cannot tell which one it names",
            where=f"the installed plugins ({', '.join(repr(p) for p in plugins)})",
            fix=("keep one of them: set " + " or ".join(options) + ", or uninstall the distribution you do not "
                 "want (`dmlplug plugins` lists every clash)") if options else
                "uninstall all but one of their distributions (`dmlplug plugins` lists every clash)",
        )

    def clash_list(self) -> list[tuple[str, str, list[ComponentInfo]]]:
        """Every clash as ``(kind, name, [components registered under it])``, by kind then name."""
        return [(kind, key, infos) for kind in KINDS for key, infos in sorted(self.clashes[kind].items())]

    def get(self, kind: str, name: str) -> ComponentInfo:
        """Look a component up by name or alias.

        Raises:
            ComponentError: No such component (the message suggests close names and plugins that failed), or
                several plugins register the name (it names them and how to keep one).
        """
        kind = normalize_kind(kind)
        table, aliases = self._tables[kind], self._aliases[kind]
        if name in self.clashes[kind]:
            raise self.clash_error(kind, name)
        if name in table:
            return table[name]
        if name in aliases:
            return table[aliases[name]]
        fix = f"run `dmlplug list {kind}` to see every registered {singular(kind)}"
        if self.load_errors:
            broken = ", ".join(sorted(self.load_errors))
            fix += f"; plugins that failed to load (see `dmlplug plugins`): {broken}"
        raise ComponentError(
            f"unknown {singular(kind)} {name!r}{did_you_mean(name, [*table, *aliases])}", fix=fix
        )

    def names(self, kind: str) -> list[str]:
        """Registered names of one kind, sorted."""
        return sorted(self._tables[normalize_kind(kind)])

    def infos(self, kind: str) -> Iterator[ComponentInfo]:
        """Registered components of one kind, sorted by name."""
        table = self._tables[normalize_kind(kind)]
        return (table[n] for n in sorted(table))


def _first_doc_line(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""

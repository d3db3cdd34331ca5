"""Which index codec: ``--codec NAME[:key=value,...]`` and the shortcut flags, looked up in a registry and built.

Codecs are the registered components of kind ``index_codecs`` (the built-ins are ``dmlplug_builtins.codecs``;
``dmlplug list index_codecs --params``). The registry is always passed in: the command line hands down its
plugin host's, so that a plugin's codec is found, and nothing here loads a host itself. A codec is validated
(name and Params) before any gallery is embedded; an index folder is read back with the codec its ``index.json``
names, built from the Params its recorded keys give.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dmlplug.bundle.errors import BundleError
from dmlplug.errors import DmlplugError

if TYPE_CHECKING:
    from dmlplug.protocols.retrieval import IndexCodec
    from dmlplug.registry import ComponentInfo, Registry

KIND = "index_codecs"
#: The codec of ``dmlplug index`` without ``--codec`` (and of the exact index folders every dmlplug wrote).
EXACT_CODEC = "float32"
#: How to see every codec and its parameters.
LIST_CODECS = "see `dmlplug list index_codecs --params` for every codec and its parameters"
EXAMPLE = "pq:pq_m=64,nlist=100"


@dataclass(frozen=True)
class Codec:
    """A registered index codec, built.

    Attributes:
        name: Its registered name (``index.json``'s ``codec``).
        component: The built :class:`~dmlplug.protocols.IndexCodec`.
    """

    name: str
    component: IndexCodec


def pick_codec(spec: str | Mapping[str, Any], registry: Registry, *, where: str = "--codec",
               **fields: Any) -> Codec:
    """The codec ``spec`` names (``"pq"``, ``"pq:pq_m=64"`` or ``{"name": "pq", "pq_m": 64}``), with ``fields`` set.

    Args:
        spec: The codec and some of its parameters.
        registry: Where codecs are looked up.
        where: The option, for messages.
        **fields: Parameters given by the shortcut flags (``nlist=4`` from ``--nlist 4``); ``None``: not given.

    Raises:
        BundleError: An unknown codec, a parameter it does not have or an invalid value, or a flag that sets a
            parameter the spec sets too.
    """
    from dmlplug.tables import table_from_text

    try:
        table = dict(spec) if isinstance(spec, Mapping) else table_from_text(spec, where=where, example=EXAMPLE)
        info = _lookup(registry, str(table.get("name")))
    except DmlplugError as exc:
        raise BundleError(exc.what, where=where, fix=LIST_CODECS) from None
    for field, value in fields.items():
        if value is None:
            continue
        flag = "--" + field.replace("_", "-")
        if field not in info.params.model_fields:
            users = ", ".join(i.name for i in registry.infos(KIND) if field in i.params.model_fields)
            raise BundleError(f"{flag} does not apply to the {info.name} codec",
                              fix=f"leave it out, or use a codec it applies to ({users or 'none is registered'})")
        if field in table:
            raise BundleError(f"{flag} and {where} {spec} both set {field}", fix="give it once")
        table[field] = value
    return build_codec(info, {k: v for k, v in table.items() if k != "name"}, where=where, registry=registry)


def budget_codecs(registry: Registry, **fields: Any) -> list[Codec]:
    """Every registered codec, with the shortcut ``fields`` (not ``None``) that its Params have, in listing order.

    Raises:
        BundleError: A value is invalid for a codec that has the field.
    """
    codecs = []
    for info in registry.infos(KIND):
        own = {f: v for f, v in fields.items() if v is not None and f in info.params.model_fields}
        codecs.append(build_codec(info, own, where="--budget", registry=registry))
    return codecs


def recorded_codec(name: str, recorded: Mapping[str, Any], registry: Registry | None, where: str) -> Codec:
    """The codec of an index folder: ``name`` with the Params that ``index.json``'s ``recorded`` keys give.

    Raises:
        BundleError: No registry to look it up in, the codec is not registered (its plugin is missing or
            disabled), or a recorded value is not a valid parameter.
    """
    if registry is None:
        raise BundleError(f"the index {where} is a {name} index, and reading one needs the registry of index codecs",
                          where=where, fix="pass one: read_index(folder, registry=dmlplug.plugin_host().registry)"
                          " (dmlplug search and the index commands do)")
    try:
        info = _lookup(registry, name)
    except DmlplugError as exc:
        raise BundleError(f"the index {where} was built by the index codec {name!r}, which is not registered: "
                          f"{exc.what}", where=where, fix="install or enable the plugin that provides it; "
                          + LIST_CODECS) from None
    return build_codec(info, {k: v for k, v in recorded.items() if k in info.params.model_fields}, where=where,
                       registry=registry)


def build_codec(info: ComponentInfo, raw: dict[str, Any], *, where: str, registry: Registry) -> Codec:
    """Validate ``raw`` as ``info``'s Params and build the codec (its Protocol checked).

    Raises:
        BundleError: A value is invalid, or the factory fails its Protocol.
    """
    from dmlplug.context import BuildContext

    try:
        params = info.validate(raw, where=f"{where} {info.name}", registry=registry)
        return Codec(info.name, info.build(params, BuildContext()))
    except DmlplugError as exc:
        if isinstance(exc, BundleError):
            raise
        raise BundleError(exc.what, where=exc.where or where, fix=exc.fix or LIST_CODECS) from None


def _lookup(registry: Registry, name: str) -> ComponentInfo:
    info: ComponentInfo = registry.get(KIND, name)
    return info

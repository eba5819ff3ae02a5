"""One path language for every field of a scenario and of the profiles it uses.

A path is dot-separated. Its parts are, in turn, field names of the schema (``run.duration``,
``load.users``), keys of mappings (``router.rules.chat``, ``compute.peak.bf16``), and items
of lists, by their ``name`` where they have one (``backends.gpu``, ``classes.chat``,
``memory.hbm``) or by index (``backends.0``). A few shorthands read naturally and are
spelled out in the schema (``path_aliases``): a backend's ``hardware`` and ``model`` are its
deployment's, and a compute peak may be named by its precision (``compute.bf16``).

A path may go through a reference to a profile (``deployment.hardware``, ``load.workload``):
the profile the id names is copied into the scenario there (inline), and the rest of the
path goes into it: ``backends.gpu.hardware.memory.hbm.bandwidth=6.7 TB/s``. Setting a sourced
number (``{value, source, confidence}``) to a bare value sets its value and marks it as the
user's: ``source: user-override`` (added to the profile's ``sources``), ``confidence:
assumed`` and a note of what it replaced. A mapping replaces the whole node.

A path that does not resolve is refused with what is there instead (the fields of the
model, the names in the list). Values are validated with the whole document afterwards, so
their errors name the file and the field as any other.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

from simulator.config.base import Confidence, Profile, Sourced
from simulator.errors import ConfigError, did_you_mean, naming
from simulator.units import SI_NUMBERS

M = TypeVar("M", bound=BaseModel)
P = TypeVar("P", bound=Profile)


@dataclass(frozen=True)
class Mark:
    """The provenance a set sourced number gets: its ``source`` (with the citation the profile's
    ``sources`` gets for it), its ``confidence`` and, when given, its ``note``."""

    source: str
    citation: str
    confidence: Confidence
    note: str = ""  # empty: what it replaced


#: A number the user set (``--set``, a sweep factor, :func:`with_values`).
USER_OVERRIDE = Mark("user-override", "a value set by the user (--set, a sweep factor or the Python API)", "assumed")


class Profiles(Protocol):
    """Where the profile a reference names is found (a :class:`~simulator.config.loading.Catalog`)."""

    def profile(self, kind: type[P], profile_id: str) -> P: ...


def _strip(annotation: Any) -> Any:
    """A type without ``Annotated`` wrappers and without ``None`` in a union."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _members(annotation: Any) -> list[Any]:
    """The alternatives of a union (one for any other type)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return [_strip(a) for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _matches(model: type[BaseModel], data: Mapping[str, Any]) -> bool:
    """Whether ``data`` can be this member of a tagged union: every literal tag it gives fits."""
    for name, field in model.model_fields.items():
        allowed = _strip(field.annotation)
        given = data.get(name)
        if get_origin(allowed) is Literal and given is not None and given not in get_args(allowed):
            return False
    return True


class _Walk:
    """One path being followed through raw data and, beside it, through the schema."""

    def __init__(self, path: str, where: str, profiles: Profiles | None) -> None:
        self.path, self.where, self.profiles = path, where, profiles
        self.profile: dict[str, Any] | None = None  # the innermost profile the path entered

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}{self.path}: {message}")

    def model_of(self, annotation: Any, node: Any) -> Any:
        """The schema type of ``node``: a union resolved by the data's tags; a reference made inline."""
        members = _members(_strip(annotation))
        if len(members) == 1:
            return members[0]
        if isinstance(node, str) and _profile_kinds(members):
            return str  # a reference by id; the caller inlines it when the path goes on
        return _fitting_model([m for m in members if _is_model(m)], node, annotation)

    def child(self, parent: Any, annotation: Any, key: str, at: str) -> tuple[Any, Any]:
        """(the key or index of ``key`` in ``parent``, the schema type under it)."""
        annotation = _strip(annotation)
        if _is_model(annotation):
            return key, self._field(annotation, key, at)
        origin = get_origin(annotation)
        if origin is list:
            return self._item(parent, _strip(get_args(annotation)[0]), key, at)
        if origin is dict:
            return key, get_args(annotation)[1]
        raise self.fail(f"{at} does not resolve to a mapping (it is a value)")

    def _field(self, model: type[BaseModel], key: str, at: str) -> Any:
        """The annotation of field ``key`` of ``model``; an unknown key fails listing the known ones."""
        aliases: dict[str, str] = getattr(model, "path_aliases", {})
        if key not in model.model_fields:
            fields = ", ".join([*model.model_fields, *aliases])
            hint = did_you_mean(key, [*model.model_fields, *aliases])
            raise self.fail(f"unknown key{hint} ({at or 'the top level'} has: {fields})") from None
        return model.model_fields[key].annotation

    def _item(self, parent: Any, item: Any, key: str, at: str) -> tuple[int, Any]:
        """(the index of the list item ``key`` names, by its ``name`` when items have one, else by
        index; the item's type); a missing item fails listing the names or indices there are."""
        items = parent if isinstance(parent, list) else []
        named = _is_model(item) and "name" in item.model_fields
        index = _item_index(items, key, named)
        if index is None:
            raise self.fail(_no_item(items, key, named, at))
        return index, item

    def descend(self, node: Any, model: Any, key: Any, annotation: Any, done: list[str]) -> Any:
        """The mapping or list under ``node[key]`` the path goes on into: a profile named by id
        copied in, a missing one started from its default; fails on a plain value."""
        child = node[key] if _has(node, key) else None
        if self.model_of(annotation, child) is str and isinstance(child, str):  # a profile by id: copied in
            child = self.inline(_profile_kinds(_members(_strip(annotation)))[0], child)
        elif child is None:
            child = _default(node, model, key)
        if not isinstance(child, dict | list):
            raise self.fail(f"{'.'.join(done)} does not resolve to a mapping (it is a value)")
        return child

    def inline(self, kind: type[Profile], profile_id: str) -> dict[str, Any]:
        if self.profiles is None:
            raise self.fail(f"{profile_id!r} names a profile, and no catalog was given to look it up in")
        return self.profiles.profile(kind, profile_id).model_dump(mode="json")


def _item_index(items: list[Any], key: str, named: bool) -> int | None:
    """The index of the first item whose ``name`` is ``key`` (items that have names), else of
    the item at index ``key``; None when there is neither."""
    for index, entry in enumerate(items):
        if named and isinstance(entry, Mapping) and entry.get("name") == key:
            return index
    if key.isdigit() and int(key) < len(items):
        return int(key)
    return None


def _no_item(items: list[Any], key: str, named: bool, at: str) -> str:
    """The error for a list without item ``key``: the names there are (or the index range)."""
    names = [str(e.get("name")) for e in items if isinstance(e, Mapping)] if named else []
    listed = ", ".join(names) or (f"indices 0 to {len(items) - 1}" if items else "none")
    return f"{at} has no item {key!r}{did_you_mean(key, names)} ({listed})"


def _profile_kinds(members: Sequence[Any]) -> list[type[Profile]]:
    """The profile classes among a union's members (a field that may name a profile by id)."""
    return [m for m in members if _is_model(m) and issubclass(m, Profile)]


def _fitting_model(models: list[Any], node: Any, annotation: Any) -> Any:
    """The first model whose tags ``node`` matches, else the only model, else ``annotation`` itself."""
    fitting = [m for m in models if isinstance(node, Mapping) and _matches(m, node)]
    return fitting[0] if fitting else (models[0] if len(models) == 1 else annotation)


def _expand(parts: list[str], annotation: Any, node: Any, walk: _Walk) -> list[str]:
    """The next part with any shorthand of the schema spelled out."""
    model = walk.model_of(annotation, node)
    aliases: dict[str, str] = getattr(model, "path_aliases", {}) if _is_model(model) else {}
    head = parts[0]
    return [*aliases[head].split("."), *parts[1:]] if head in aliases and head not in model.model_fields else parts


def set_path(
    data: Mapping[str, Any],
    path: str,
    value: object,
    schema: type[BaseModel],
    profiles: Profiles | None = None,
    where: str = "",
    mark: Mark | None = USER_OVERRIDE,
) -> dict[str, Any]:
    """A copy of raw ``data`` (of ``schema``) with the field at ``path`` set to ``value``.

    Parameters
    ----------
    data
        The document as read (mappings, lists, scalars), not yet validated.
    path
        Dotted path (the module docstring).
    value
        The new value, as YAML would give it.
    schema
        The model ``data`` is validated as afterwards.
    profiles
        Where a reference's profile is looked up when the path goes into it.
    where
        Prefix of error messages (the file and the flag, e.g. ``"s.yaml: --set "``).
    mark
        The provenance a sourced number set to a bare value gets (None: its value only).

    Raises
    ------
    ConfigError
        If the path does not resolve; the message names what is there instead.
    """
    walk = _Walk(path, where, profiles)
    root: dict[str, Any] = copy.deepcopy(dict(data))
    node: Any = root
    annotation: Any = schema
    parts = path.split(".")
    done: list[str] = []
    while True:
        parts = _expand(parts, annotation, node, walk)
        at = ".".join(done)
        model = walk.model_of(annotation, node)
        if _is_model(model) and issubclass(model, Profile) and isinstance(node, dict):
            walk.profile = node
        key, child_annotation = walk.child(node, model, parts[0], at)
        done.append(parts[0])
        if len(parts) == 1:
            _assign(node, key, value, _strip(child_annotation), walk, mark)
            return root
        child = walk.descend(node, model, key, child_annotation, done)
        node[key] = child
        node, annotation, parts = child, child_annotation, parts[1:]


def _has(node: Any, key: Any) -> bool:
    return (isinstance(node, dict) and key in node) or (isinstance(node, list) and isinstance(key, int))


def _default(node: Any, model: Any, key: Any) -> Any:
    """What a missing mapping starts as: the field's default written out (so a tagged union keeps
    its tag), else empty."""
    if _is_model(model) and isinstance(key, str):
        default = model.model_fields[key].get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            return default.model_dump(mode="json")
    return {}


def _assign(node: Any, key: Any, value: object, annotation: Any, walk: _Walk, mark: Mark | None) -> None:
    """Set ``node[key]``; a sourced number given a bare value keeps its shape and says who set it."""
    current = node[key] if _has(node, key) else None
    sourced = _is_model(annotation) and issubclass(annotation, Sourced)
    if sourced and isinstance(current, Mapping) and not isinstance(value, Mapping):
        node[key] = _marked(current, value, walk, mark)
    elif key == "value" and isinstance(node, dict) and {"source", "confidence"} <= node.keys():
        node.update(_marked(node, value, walk, mark))
    else:
        node[key] = value


def _marked(number: Mapping[str, Any], value: object, walk: _Walk, mark: Mark | None) -> dict[str, Any]:
    """The sourced number with its new value and, under ``mark``, its new provenance."""
    if mark is None:
        return {**number, "value": value}
    if walk.profile is not None:
        walk.profile["sources"] = {**walk.profile.get("sources", {}), mark.source: mark.citation}
    note = mark.note or f"{walk.path} (was {number.get('value')} from {number.get('source')})"
    return {**number, "value": value, "source": mark.source, "confidence": mark.confidence, "note": note}


def with_values(model: M, values: Mapping[str, object], mark: Mark | None = USER_OVERRIDE) -> M:
    """A copy of a validated ``model`` with each ``path: value`` set (sourced numbers marked with
    ``mark``), validated again. A value is a string with a unit, or a number in SI units.

    Examples
    --------
    >>> from simulator.config.loading import Catalog
    >>> h100 = Catalog().hardware("nvidia-h100-sxm")
    >>> faster = with_values(h100, {"memory.hbm.bandwidth": "6.7 TB/s"})
    >>> faster.tier("hbm").bandwidth.value, faster.tier("hbm").bandwidth.source
    (6700000000000.0, 'user-override')
    """
    data = model.model_dump()
    for path, value in values.items():
        data = set_path(data, path, value, type(model), mark=mark)
    return type(model).model_validate(data, context=SI_NUMBERS)


def get_path(model: BaseModel, path: str) -> Any:
    """The value at ``path`` of a validated ``model`` (list items by name or index, shorthands spelled out).

    Examples
    --------
    >>> from simulator.config.loading import Catalog
    >>> get_path(Catalog().hardware("nvidia-h100-sxm"), "memory.hbm.bandwidth").value
    3350000000000.0
    """
    node: Any = model
    done: list[str] = []
    parts = path.split(".")
    while parts:
        parts = _spelled_out(node, parts)
        node = _get_child(node, parts[0], path, ".".join(done) or "the top level")
        done.append(parts[0])
        parts = parts[1:]
    return node


def _spelled_out(node: Any, parts: list[str]) -> list[str]:
    """``parts`` with a model's shorthand (``path_aliases``) at their head spelled out."""
    aliases: dict[str, str] = getattr(type(node), "path_aliases", {})
    if isinstance(node, BaseModel) and parts[0] in aliases and parts[0] not in type(node).model_fields:
        return [*aliases[parts[0]].split("."), *parts[1:]]
    return parts


def _get_child(node: Any, key: str, path: str, at: str) -> Any:
    """What ``key`` names under ``node`` (a model's field, a list item by name or index, a dict's
    entry); an error naming ``path`` and what ``at`` has when there is none."""
    if isinstance(node, BaseModel):
        return _get_field(node, key, path, at)
    if isinstance(node, list):
        return _get_item(node, key, path, at)
    if isinstance(node, dict):
        if key not in node:
            raise ConfigError(f"{path}: {at} has no key {key!r} ({', '.join(map(str, node)) or 'none'})")
        return node[key]
    raise ConfigError(f"{path}: {at} does not resolve to a mapping (it is a value)")


def _get_field(node: BaseModel, key: str, path: str, at: str) -> Any:
    """Field ``key`` of a model; an unknown key lists the fields and shorthands there are."""
    if key not in type(node).model_fields:
        known = [*type(node).model_fields, *getattr(type(node), "path_aliases", {})]
        raise ConfigError(f"{path}: unknown key{did_you_mean(key, known)} ({at} has: {', '.join(known)})")
    return getattr(node, key)


def _get_item(node: list[Any], key: str, path: str, at: str) -> Any:
    """The list item named ``key`` (the first with that ``name``), else the one at index ``key``."""
    named = [item for item in node if getattr(item, "name", None) == key]
    if not named and not (key.isdigit() and int(key) < len(node)):
        names = ", ".join(str(getattr(item, "name", i)) for i, item in enumerate(node))
        raise ConfigError(f"{path}: {at} has no item {key!r} ({names})")
    return named[0] if named else node[int(key)]


def write_in(model: M, profiles: Profiles) -> M:
    """A copy of ``model`` with every profile it names by id written in (hardware, models, workloads).

    Any field whose type is a reference (an id or the profile itself) is found from the schema,
    so a config class of a plugin is written in as the bundled ones are.
    """
    return _written_in(model, profiles, "")


def _written_in(model: M, profiles: Profiles, at: str) -> M:
    update = {}
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        written = _written(value, field.annotation, profiles, f"{at}{name}")
        if written is not value:
            update[name] = written
    return model.model_copy(update=update) if update else model


def _written(value: Any, annotation: Any, profiles: Profiles, at: str) -> Any:
    """``value`` of the field at path ``at`` with the profiles it names written in (an unknown id
    is an error naming the path)."""
    if isinstance(value, BaseModel):
        return _written_in(value, profiles, f"{at}.")
    annotation = _strip(annotation)
    if isinstance(value, str):
        return _written_reference(value, annotation, profiles, at)
    if isinstance(value, list) and get_origin(annotation) is list:
        return _written_items(value, get_args(annotation)[0], profiles, at)
    if isinstance(value, dict) and get_origin(annotation) is dict:
        return _written_entries(value, get_args(annotation)[1], profiles, at)
    return value


def _written_reference(value: str, annotation: Any, profiles: Profiles, at: str) -> Any:
    """The profile ``value`` names when the field may name one by id; else ``value`` itself."""
    kinds = _profile_kinds(_members(annotation))
    if not kinds:
        return value
    with naming(at):
        return profiles.profile(kinds[0], value)


def _written_items(value: list[Any], item: Any, profiles: Profiles, at: str) -> list[Any]:
    """A list with each item written in; the same list when none changed."""
    items = [_written(v, item, profiles, f"{at}.{i}") for i, v in enumerate(value)]
    return items if any(a is not b for a, b in zip(items, value, strict=True)) else value


def _written_entries(value: dict[Any, Any], entry: Any, profiles: Profiles, at: str) -> dict[Any, Any]:
    """A dict with each value written in; the same dict when none changed."""
    entries = {k: _written(v, entry, profiles, f"{at}.{k}") for k, v in value.items()}
    return entries if any(entries[k] is not v for k, v in value.items()) else value

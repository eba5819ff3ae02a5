"""YAML -> dict -> validated model, with errors that name the file and the field path.

Bundled profiles are found beside the package (``hardware_profiles/``, ``model_profiles/``
in a source checkout, or ``simulator/_bundled/`` in an installed wheel); a user's folders add
to them (:class:`Catalog`).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from simulator.config.base import Profile
from simulator.config.files import parse_yaml, read_yaml
from simulator.config.hardware import HardwareProfile
from simulator.config.model import ModelSpec
from simulator.config.stack import StackProfile
from simulator.config.workload import WorkloadSpec
from simulator.errors import ConfigError, InfersimWarning, did_you_mean

__all__ = ["Catalog", "ConfigError", "load_file", "parse_override", "read_yaml", "validate_data"]

M = TypeVar("M", bound=BaseModel)
P = TypeVar("P", bound=Profile)

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def bundled_dir(name: str) -> Path:
    """Directory of a bundled profile collection (``hardware_profiles`` or ``model_profiles``)."""
    for candidate in (_PACKAGE_DIR / "_bundled" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"bundled directory {name!r} not found next to {_PACKAGE_DIR}")


def _user_path(data: object, loc: tuple[int | str, ...]) -> str:
    """The field path as the user wrote it: union tags pydantic inserts are dropped."""
    parts, node = [], data
    for index, part in enumerate(loc):
        in_dict = isinstance(node, dict) and part in node
        if in_dict or (isinstance(node, list) and isinstance(part, int) and part < len(node)):
            node = node[part]  # type: ignore[index]
        elif index < len(loc) - 1 and isinstance(node, dict):
            continue  # a discriminator tag, not a key of the input
        else:
            node = None
        parts.append(str(part))
    return ".".join(parts) or "(top level)"


def format_validation_error(source: str, error: ValidationError, data: object = None) -> str:
    """One line per problem: ``file: field.path: message``."""
    lines = []
    for item in error.errors():
        path = _user_path(data, item["loc"])
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key (not part of the schema; check its spelling)"
        lines.append(f"{source}: {path}: {message}")
    return "\n".join(lines)


def validate_data(model: type[M], data: object, source: str) -> M:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of fields at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(source, exc, data)) from None


def load_file(model: type[M], path: Path) -> M:
    return validate_data(model, read_yaml(path), str(path))


class Shelf(Generic[P]):
    """One kind of profile by id: user folders first, then the bundled folder, then profiles given in memory.

    A profile found in a user folder that the bundled folder also has *shadows* it; using it
    warns (:class:`~simulator.errors.InfersimWarning`), once.
    """

    def __init__(self, model: type[P], kind: str, folders: tuple[Path, ...], given: tuple[P, ...] = ()) -> None:
        self.model, self.kind, self.folders = model, kind, folders
        self.given = {profile.id: profile for profile in given}
        self._loaded: dict[str, P] = dict(self.given)

    def ids(self) -> list[str]:
        return sorted({path.stem for folder in self.folders for path in folder.glob("*.yaml")} | self.given.keys())

    def get(self, profile_id: str) -> P:
        if profile_id not in self._loaded:
            found = [
                folder / f"{profile_id}.yaml" for folder in self.folders if (folder / f"{profile_id}.yaml").exists()
            ]
            if not found:
                raise ConfigError(
                    f"unknown {self.kind} profile {profile_id!r}{did_you_mean(profile_id, self.ids())}; known: "
                    f"{', '.join(self.ids())} "
                    f"(in {', '.join(map(str, self.folders))})"
                )
            if len(found) > 1:
                warnings.warn(
                    f"{self.kind} profile {profile_id!r} from {found[0]} shadows the one in {found[-1]}",
                    InfersimWarning,
                    stacklevel=3,
                )
            loaded = load_file(self.model, found[0])
            if loaded.id != profile_id:
                raise ConfigError(f"{found[0]}: id: is {loaded.id!r} but the file name says {profile_id!r}")
            self._loaded[profile_id] = loaded
        return self._loaded[profile_id]

    def with_given(self, profiles: Sequence[P]) -> Shelf[P]:
        return Shelf(self.model, self.kind, self.folders, (*self.given.values(), *profiles))


class Catalog:
    """Hardware, model, workload and serving-stack profiles by id: the bundled ones, plus those of user folders.

    A user folder *adds* profiles: ``--hardware-dir my-profiles`` keeps every bundled profile
    and adds its own; one with a bundled profile's id shadows it, with a warning when used.
    """

    def __init__(
        self,
        hardware_dir: Path | None = None,
        model_dir: Path | None = None,
        workload_dir: Path | None = None,
        stack_dir: Path | None = None,
    ) -> None:
        self.hardware_shelf = Shelf(HardwareProfile, "hardware", _folders(hardware_dir, "hardware_profiles"))
        self.model_shelf = Shelf(ModelSpec, "model", _folders(model_dir, "model_profiles"))
        self.workload_shelf = Shelf(WorkloadSpec, "workload", _folders(workload_dir, "workloads"))
        self.stack_shelf = Shelf(StackProfile, "stack", _folders(stack_dir, "stack_profiles"))

    def with_profiles(
        self,
        hardware: Sequence[HardwareProfile] = (),
        models: Sequence[ModelSpec] = (),
        stacks: Sequence[StackProfile] = (),
    ) -> Catalog:
        """A catalog that also holds these profiles (in memory), ahead of any of the same id."""
        catalog = copy.copy(self)
        catalog.hardware_shelf = self.hardware_shelf.with_given(hardware)
        catalog.model_shelf = self.model_shelf.with_given(models)
        catalog.stack_shelf = self.stack_shelf.with_given(stacks)
        return catalog

    def hardware_ids(self) -> list[str]:
        return self.hardware_shelf.ids()

    def model_ids(self) -> list[str]:
        return self.model_shelf.ids()

    def stack_ids(self) -> list[str]:
        return self.stack_shelf.ids()

    def stack(self, ref: str | StackProfile) -> StackProfile:
        """The serving stack profile an id names (a profile given inline is its own answer)."""
        return ref if isinstance(ref, StackProfile) else self.stack_shelf.get(ref)

    def workload_ids(self) -> list[str]:
        return self.workload_shelf.ids()

    def hardware(self, ref: str | HardwareProfile) -> HardwareProfile:
        """The hardware profile an id names (a profile given inline is its own answer)."""
        return ref if isinstance(ref, HardwareProfile) else self.hardware_shelf.get(ref)

    def model(self, ref: str | ModelSpec) -> ModelSpec:
        """The model profile an id names (a profile given inline is its own answer)."""
        return ref if isinstance(ref, ModelSpec) else self.model_shelf.get(ref)

    def workload(self, ref: str | WorkloadSpec) -> WorkloadSpec:
        """The workload an id names (a workload given inline is its own answer)."""
        return ref if isinstance(ref, WorkloadSpec) else self.workload_shelf.get(ref)

    def profile(self, kind: type[P], profile_id: str) -> P:
        """A profile of the given class by id (for field paths that go into a referenced profile)."""
        shelves: tuple[Shelf[Any], ...] = (self.hardware_shelf, self.model_shelf, self.workload_shelf, self.stack_shelf)
        shelf = next(s for s in shelves if s.model is kind)
        found: P = shelf.get(profile_id)
        return found


def _folders(user: Path | None, bundled: str) -> tuple[Path, ...]:
    """The user's folder (which must exist) ahead of the bundled one."""
    if user is not None and not user.is_dir():
        raise ConfigError(f"{user}: no such folder (given as the {bundled.replace('_', ' ').rstrip('s')} folder)")
    return (*((user,) if user is not None else ()), bundled_dir(bundled))


def parse_override(text: str) -> tuple[str, list[object]]:
    """``path.to.field=value`` (value parsed as YAML); ``a,b,c`` gives several values (a sweep).

    A YAML flow value (``{...}`` or ``[...]``) is one value, commas and all.
    """
    path, sep, raw = text.partition("=")
    if not sep or not path:
        raise ConfigError(f"--set {text!r}: expected path=value, e.g. load.users=16")
    flow = raw.strip().startswith(("{", "["))
    parts = [raw] if flow or "," not in raw else raw.split(",")
    values = [parse_yaml(part, f"--set {text!r}") for part in parts]
    return path.strip(), values

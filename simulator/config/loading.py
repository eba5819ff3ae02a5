"""YAML -> dict -> validated model, with errors that name the file and the field path.

Bundled profiles are found beside the package (``hardware_profiles/``, ``model_profiles/``
in a source checkout, or ``simulator/_bundled/`` in an installed wheel).
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from simulator.config.base import Profile
from simulator.config.files import parse_yaml, read_yaml
from simulator.config.hardware import HardwareProfile
from simulator.config.model import ModelSpec
from simulator.config.stack import StackProfile
from simulator.config.workload import WorkloadSpec
from simulator.errors import ConfigError

__all__ = ["Catalog", "ConfigError", "apply_override", "load_file", "parse_override", "read_yaml", "validate_data"]

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


class Catalog:
    """Hardware and model profiles by id, loaded lazily from two directories."""

    def __init__(
        self,
        hardware_dir: Path | None = None,
        model_dir: Path | None = None,
        workload_dir: Path | None = None,
        stack_dir: Path | None = None,
    ) -> None:
        self.hardware_dir = _folder(hardware_dir, "hardware profile") or bundled_dir("hardware_profiles")
        self.model_dir = _folder(model_dir, "model profile") or bundled_dir("model_profiles")
        self.workload_dir = _folder(workload_dir, "workload") or bundled_dir("workloads")
        self.stack_dir = _folder(stack_dir, "stack profile") or bundled_dir("stack_profiles")
        self._hardware: dict[str, HardwareProfile] = {}
        self._models: dict[str, ModelSpec] = {}
        self._workloads: dict[str, WorkloadSpec] = {}
        self._stacks: dict[str, StackProfile] = {}

    def hardware_ids(self) -> list[str]:
        return sorted(path.stem for path in self.hardware_dir.glob("*.yaml"))

    def model_ids(self) -> list[str]:
        return sorted(path.stem for path in self.model_dir.glob("*.yaml"))

    def hardware(self, profile_id: str) -> HardwareProfile:
        if profile_id not in self._hardware:
            self._hardware[profile_id] = self._load(
                HardwareProfile, self.hardware_dir, profile_id, self.hardware_ids(), "hardware"
            )
        return self._hardware[profile_id]

    def model(self, profile_id: str) -> ModelSpec:
        if profile_id not in self._models:
            self._models[profile_id] = self._load(ModelSpec, self.model_dir, profile_id, self.model_ids(), "model")
        return self._models[profile_id]

    def stack_ids(self) -> list[str]:
        return sorted(path.stem for path in self.stack_dir.glob("*.yaml"))

    def stack(self, profile_id: str) -> StackProfile:
        if profile_id not in self._stacks:
            self._stacks[profile_id] = self._load(StackProfile, self.stack_dir, profile_id, self.stack_ids(), "stack")
        return self._stacks[profile_id]

    def workload_ids(self) -> list[str]:
        return sorted(path.stem for path in self.workload_dir.glob("*.yaml"))

    def workload(self, workload_id: str) -> WorkloadSpec:
        if workload_id not in self._workloads:
            self._workloads[workload_id] = self._load(
                WorkloadSpec, self.workload_dir, workload_id, self.workload_ids(), "workload"
            )
        return self._workloads[workload_id]

    @staticmethod
    def _load(model: type[P], directory: Path, profile_id: str, known: list[str], kind: str) -> P:
        path = directory / f"{profile_id}.yaml"
        if not path.exists():
            raise ConfigError(f"unknown {kind} profile {profile_id!r}; known: {', '.join(known)} (in {directory})")
        loaded = load_file(model, path)
        loaded_id = loaded.id
        if loaded_id != profile_id:
            raise ConfigError(f"{path}: id: is {loaded_id!r} but the file name says {profile_id!r}")
        return loaded


def _folder(path: Path | None, kind: str) -> Path | None:
    """A user-given profile folder, which must exist."""
    if path is not None and not path.is_dir():
        raise ConfigError(f"{path}: no such folder (given as the {kind} folder)")
    return path


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


def apply_override(data: dict[str, object], path: str, value: object, source: str) -> dict[str, object]:
    """A copy of ``data`` with ``path`` (dots; integers index lists) set to ``value``.

    Intermediate mappings must exist (or be creatable inside a mapping); a path through a
    scalar names the part that does not resolve.
    """
    import copy

    root = copy.deepcopy(data)
    node: object = root
    parts = path.split(".")
    for depth, part in enumerate(parts[:-1]):
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"{source}: --set {path}: {where} is not an index of a list of {len(node)}")
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node.setdefault(part, {})
        else:
            raise ConfigError(f"{source}: --set {path}: {'.'.join(parts[:depth])} is a value, not a mapping")
    last = parts[-1]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"{source}: --set {path}: {'.'.join(parts[:-1]) or path} does not resolve to a mapping")
    return root

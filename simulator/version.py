"""The infersim version, written here once: ``pyproject.toml`` reads it from this file, so the
installed package's metadata says the same. A plain constant, not read back from that metadata
with :mod:`importlib.metadata`, whose import alone costs every command about 30 ms of CPU."""

__version__ = "0.1.0"

"""The installed infersim version (``0+unknown`` when run from a source tree without installing)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("infersim")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

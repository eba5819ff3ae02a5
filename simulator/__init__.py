"""infersim: how fast LLMs run on very different inference hardware, and what it costs.

Layers, one direction: ``config`` (pydantic data) -> ``analytic`` (pure numpy physics) ->
``cli`` (the only module that writes files).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("infersim")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

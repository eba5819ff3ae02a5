"""Names the config models and the command line share, in a module free of pydantic: building
the command line's parser (``infersim --help``) imports this, not the models."""

from __future__ import annotations

from typing import Literal

#: Numeric precisions a weight, KV cache or activation can be stored in.
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "fp4", "mxfp4"]

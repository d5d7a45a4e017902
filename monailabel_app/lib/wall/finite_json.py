"""Replies are finite JSON: a NaN or an infinity never leaves the server.

Python's json writes NaN and Infinity (which no JSON parser must accept), and Starlette's JSONResponse refuses
them with a bare 500: a DICOM whose spacing was NaN or 1e308 gave both. The readers now treat such spacing as
unknown, and this is the net under every infer reply: a non-finite number becomes null.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_json"]


def finite_json(value: Any) -> Any:
    """`value` with every non-finite float (at any depth of dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    try:
        import numpy as np

        if isinstance(value, np.floating):
            return float(value) if np.isfinite(value) else None
    except ImportError:
        pass
    return value

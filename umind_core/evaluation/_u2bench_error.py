"""The one error type of the U2-Bench protocol, below every module that raises it.

The scorers (`u2bench`) and the lenient BLEU beside them (`_bleu`) refuse malformed input with the same type, so
a caller catches one exception for the whole protocol; it lives here so that `_bleu` need not import the module
that re-exports it (an import cycle before).
"""

from __future__ import annotations

__all__ = ["U2BenchInputError"]


class U2BenchInputError(ValueError):
    """An input to a U2-Bench scorer is malformed; the message names it."""

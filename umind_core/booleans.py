"""The one rule for true/false given as text (conf values, request params, form fields): which words count.

Each caller raises its own error type (a conf error at start-up, a 400 for a request) naming its key.
"""

from __future__ import annotations

__all__ = ["TRUE_WORDS", "FALSE_WORDS", "as_bool"]

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def as_bool(value: object, empty: bool | None = None) -> bool | None:
    """The boolean `value` stands for, or None when it is not one; `empty` is what "" means (None: not one)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    if not v:
        return empty
    return True if v in TRUE_WORDS else False if v in FALSE_WORDS else None

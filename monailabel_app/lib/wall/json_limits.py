"""How deep and how large a JSON value a client may send, and may have stored: the one owner of both caps.

Python's json raises RecursionError (not ValueError) at about 1,000 levels, so a 100,000-deep `params` was a bare
500. Worse, a stored value that parses can still break the server later: a 1 KB label info nested 500 deep made
every later write of the index a 500 (json.dumps recursed too deep) until an admin removed the label, and one
nested 250 deep stopped `datastore_v2.json` loading at the next start. Five labels with 1 MB of info each slowed
every save from 0.5 to 3.4 s (the whole index is rewritten on each). So:

* `json_depth` measures nesting on the raw text, without parsing it (no recursion, no allocation per level);
* `parse_request_json` is the parse of any JSON a request carries: too deep or malformed is a BadRequest;
* `check_stored` bounds what is kept (label info, image info, train params): `MAX_STORED_DEPTH` levels and
  `MAX_STORED_BYTES` of JSON, a 400 naming which value and which cap;
* `stored_problem` says why a value already on disk is over those caps (the datastore repairs its index with it).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import BadRequest

__all__ = ["MAX_REQUEST_DEPTH", "MAX_STORED_DEPTH", "MAX_STORED_BYTES", "json_depth", "value_depth",
           "parse_request_json", "check_stored", "stored_problem"]

#: nesting any request's JSON may have (a prompt's params are 3-4 levels deep)
MAX_REQUEST_DEPTH = 32
#: nesting of a value the server keeps (label and image info, train params)
MAX_STORED_DEPTH = 20
#: bytes of compact JSON a kept value may take
MAX_STORED_BYTES = 64 * 1024

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text, strings skipped (0 for a scalar)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    depth = deepest = 0
    for ch in _STRING.sub("", text):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def value_depth(value: Any) -> int:
    """The nesting of a parsed value (lists and dicts), counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse_request_json(text: str | bytes, what: str, max_depth: int = MAX_REQUEST_DEPTH) -> Any:
    """`text` parsed, or BadRequest naming `what`: malformed, or nested deeper than `max_depth`."""
    depth = json_depth(text)
    if depth > max_depth:
        raise BadRequest(f"{what} is nested {depth} levels deep (at most {max_depth})")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"{what} is not valid JSON ({type(exc).__name__}: {str(exc)[:120]})") from None


def stored_problem(value: Any) -> str | None:
    """Why `value` may not be kept (a phrase), or None when it may."""
    depth = value_depth(value)
    if depth > MAX_STORED_DEPTH:
        return f"is nested {depth} levels deep (at most {MAX_STORED_DEPTH})"
    try:
        size = len(json.dumps(value, separators=(",", ":"), default=str, allow_nan=False).encode("utf-8"))
    except (ValueError, TypeError, RecursionError) as exc:
        return f"cannot be stored as JSON ({type(exc).__name__})"
    if size > MAX_STORED_BYTES:
        return f"takes {size:,} bytes as JSON (at most {MAX_STORED_BYTES:,})"
    return None


def check_stored(value: Any, what: str) -> Any:
    """`value` when it may be kept; BadRequest naming `what` and the cap otherwise."""
    problem = stored_problem(value)
    if problem:
        raise BadRequest(f"{what} {problem}")
    return value

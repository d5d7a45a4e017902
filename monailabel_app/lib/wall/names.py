"""Image ids and label tags are names, never paths: the one rule the datastore guard and the infer path share.

MONAI Label's LocalDatastore joins ids and tags onto the studies folder as given, so `../victim`, an absolute
path or `.umind/versions` reach files outside the studies (or into the app's workdir). A name here is a
single path component that cannot climb (`..`), cannot hide (leading `.`, which also keeps the default
workdir `.umind` and the datastore's own `.lock` out of reach) and holds no separator, NUL, control or format
character (U+0085, U+009B, U+2028, U+202E ...) and no HTML markup. Everything that takes an id or tag from a client checks it with `check_name` before touching the
disk; the message quotes the name, never a server path.
"""

from __future__ import annotations

import unicodedata
from enum import Enum

from .errors import BadRequest

__all__ = ["MAX_NAME_CHARS", "MAX_NAME_BYTES", "check_name", "is_name", "name_problem"]

#: Unicode categories a name may not hold: controls (C0, C1: NEL U+0085, CSI U+009B), format characters (bidi
#: overrides such as U+202E, zero-width ones), line and paragraph separators (U+2028, U+2029), surrogates and
#: unassigned code points. They forge or hide lines in logs and turn names around in viewers.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
#: characters of HTML and of shell/markup quoting that a viewer of ids (OHIF, a web page of /logs) could act on
_MARKUP = ("<", ">", "&", '"', "`")
MAX_NAME_CHARS = 200
#: a file name is at most 255 bytes on the usual file systems; the stored name adds an extension (up to 7
#: bytes) and an atomic write's temp prefix and suffix, so a 200-character name in a multibyte script
#: (600 bytes) failed at the disk ("File name too long", a bare 500)
MAX_NAME_BYTES = 200


def name_problem(value: object) -> str | None:
    """Why `value` is not a name (a sentence), or None when it is one."""
    if isinstance(value, Enum):
        value = value.value
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not value:
        return "is empty"
    if len(value) > MAX_NAME_CHARS:
        return f"is {len(value)} characters long (at most {MAX_NAME_CHARS})"
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return (f"is {len(value.encode('utf-8', 'surrogatepass'))} bytes long in UTF-8 (at most {MAX_NAME_BYTES}; "
                "a file name must fit the disk's limit)")
    if "/" in value or "\\" in value:
        return "contains a path separator; ids and tags are names, not paths"
    bad = next((c for c in value if unicodedata.category(c) in _UNPRINTABLE), None)
    if bad is not None:
        kind = "format character" if unicodedata.category(bad) in ("Cf", "Zl", "Zp") else "control character"
        return f"contains the {kind} U+{ord(bad):04X} ({unicodedata.name(bad, 'unnamed')})"
    markup = next((c for c in value if c in _MARKUP), None)
    if markup is not None:
        return f"contains {markup!r}; ids and tags may not hold markup characters ({' '.join(_MARKUP)})"
    if value.startswith("."):
        return "starts with '.'; such names are reserved (no '..', no hidden files)"
    if value != value.strip():
        return "starts or ends with white space"
    return None


def is_name(value: object) -> bool:
    return name_problem(value) is None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_name(kind: str, value: object) -> str:
    """`value` as a name, or BadRequest (400) saying which `kind` (e.g. 'image id', 'label tag') is wrong."""
    problem = name_problem(value)
    if problem is not None:
        raise BadRequest(f"{kind} {_shown(value)} is not a valid name: it {problem}")
    return value.value if isinstance(value, Enum) else value  # type: ignore[return-value]

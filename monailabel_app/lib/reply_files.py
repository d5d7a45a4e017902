"""Where a reply's files are written before MONAI Label streams them back (a label map, markups).

One owner for the rule both the single-image infers and the exam reply follow: a fresh file in the request's
own folder (`wall.request_files`; removed when the request ends, whatever fails) or, outside a request, in the
system's temporary folder, named `umind-*<suffix>` so an operator can tell ours apart, its suffix the format the
client decodes by. Files written to the system folder used to stay there whenever the reply failed. MONAI Label removes a returned label file once sent; a file read back into the reply (an exam's
per-view label maps) is removed by its caller.
"""

from __future__ import annotations

import tempfile

__all__ = ["reply_path"]


def reply_path(suffix: str) -> str:
    """A new empty file's path, `umind-*<suffix>` in the request's folder (else the temporary folder)."""
    from .wall.request_files import current_scratch

    folder = current_scratch()
    with tempfile.NamedTemporaryFile(prefix="umind-", suffix=suffix, delete=False,
                                     dir=str(folder) if folder else None) as fh:
        return fh.name

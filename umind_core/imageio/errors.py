"""The three errors of image I/O; each message names the file (or markup) and why."""

from __future__ import annotations

__all__ = ["ImageReadError", "ImageWriteError", "MarkupsError"]


class ImageReadError(ValueError):
    """An input image cannot be turned into frames; the message names the file and why."""


class ImageWriteError(ValueError):
    """Output data does not fit the geometry or format it should be written in."""


class MarkupsError(ValueError):
    """A markups description or a .mrk.json file is malformed."""

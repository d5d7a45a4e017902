"""Sample studies for the out-of-the-box server: synthetic ultrasound images generated on the spot.

Written as 2D NRRD with each image's pixel spacing (a PNG has none), so the image, its label maps and markups
lie in millimetres where Slicer shows them. Named by site and a letter, with no digits: Slicer's loadVolume
(which the stock MONAILabel extension calls without its single-file option) reads same-size files whose
names differ only in a number as one stacked volume, NRRD as well as PNG (measured with slicer-core: three
syn-500000N.nrrd loaded as one 3-slice volume; breast-a.nrrd, thyroid-b.nrrd, ... load one slice each).
MONAI Label's local datastore lists the files at the top of the studies folder; a marker file keeps a later
start from generating them again.
"""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = ".umind-samples-nrrd"
#: the marker of the earlier PNG samples (a folder holding them is left as it is, with a note)
OLD_MARKER = ".umind-samples"


def write_sample_studies(folder: str | Path, n: int = 8, seed0: int = 5_000_000) -> int:
    """Fill `folder` with `n` synthetic studies unless an earlier call did; returns how many were written."""
    import numpy as np

    from umind_core.atomic import write_text
    from umind_core.data.synthetic import generate_many
    from umind_core.imageio import Geometry, write_image

    folder = Path(folder)
    if (folder / MARKER).exists() or (folder / OLD_MARKER).exists():
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for i, sample in enumerate(generate_many(n, seed0=seed0)):
        grey = sample.image if sample.image.ndim == 2 else sample.image[..., 0]
        geometry = Geometry(kind="2d", shape=grey.shape[:2], spacing=tuple(float(s) for s in sample.spacing),
                            origin=(0.0, 0.0), direction=(1.0, 0.0, 0.0, 1.0), format="nrrd")
        write_image(np.ascontiguousarray(grey, dtype=np.uint8), geometry, folder / f"{sample_name(sample.site, i)}.nrrd")
        written += 1
    write_text(folder / MARKER, f"{written} synthetic studies, seeds {seed0}..{seed0 + n - 1}\n")
    return written


def sample_name(site: str, index: int) -> str:
    """'breast-a', 'thyroid-b', ..., 'kidney-ba': unique without digits (see the module docstring)."""
    letters = ""
    index += 1
    while index:
        index, r = divmod(index - 1, 26)
        letters = chr(97 + r) + letters
    return f"{site.replace('_', '-')}-{letters}"


def main(folder: str) -> None:
    written = write_sample_studies(folder)
    if written:
        print(f"umind: {written} synthetic sample studies written to {folder}")
    elif (Path(folder) / OLD_MARKER).exists() and not (Path(folder) / MARKER).exists():
        print(f"umind: {folder} holds the earlier PNG samples, which the stock MONAILabel extension loads as one "
              "stacked volume; delete the folder to get 2D NRRD samples with spacing")
    else:
        print(f"umind: sample studies already in {folder}")


if __name__ == "__main__":
    main(sys.argv[1])

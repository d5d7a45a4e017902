"""Sample studies for the out-of-the-box server: synthetic ultrasound images generated on the spot.

MONAI Label's local datastore lists the image files at the top of the studies folder, so the generator's images
are copied there; a marker file keeps a later start from generating them again.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

MARKER = ".umind-samples"


def write_sample_studies(folder: str | Path, n: int = 8, seed0: int = 5_000_000) -> int:
    """Fill `folder` with `n` synthetic studies unless an earlier call did; returns how many were written."""
    from umind_core.data.manifest import write_synthetic_dataset

    folder = Path(folder)
    if (folder / MARKER).exists():
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        write_synthetic_dataset(tmp, n, seed0=seed0, progress=False)
        images = sorted((Path(tmp) / "images").glob("*.png"))
        for image in images:
            shutil.copy(image, folder / image.name)
    (folder / MARKER).touch()
    return len(images)


if __name__ == "__main__":
    written = write_sample_studies(sys.argv[1])
    print(f"umind: {written} synthetic sample studies written to {sys.argv[1]}" if written else
          f"umind: sample studies already in {sys.argv[1]}")

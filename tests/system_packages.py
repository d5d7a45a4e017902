"""The system packages the PACS and OHIF tests need, and the one line that says how to install them.

Orthanc (with its DICOMweb plugin) and Chromium are Debian packages, not Python ones: `.ci/run` installs them
as root before the test command. Where they are missing, those test modules skip with this one line (printed
once in the summary by conftest's `pytest_terminal_summary`), not with an error per test.
"""

from __future__ import annotations

from browser import chromium_binary
from orthanc import orthanc_binary

PACKAGES = "orthanc orthanc-dicomweb chromium"
SKIP_PREFIX = "needs system packages"


def missing_line(needs: tuple[str, ...] = ("orthanc", "chromium")) -> str | None:
    """None when what a module `needs` is installed, else the install instruction. The line names every missing
    package, whichever module asks, so that all modules skip with the same one line."""
    found = {"orthanc": orthanc_binary() is not None, "chromium": chromium_binary() is not None}
    if all(found[n] for n in needs):
        return None
    missing = [{"orthanc": "orthanc + orthanc-dicomweb"}.get(n, n) for n, ok in found.items() if not ok]
    return (f"{SKIP_PREFIX} ({', '.join(missing)} missing): PACS/OHIF tests skipped; install with "
            f"`apt-get install -y {PACKAGES}` (Debian, as root; .ci/run does it)")

"""A throwaway Orthanc PACS with its DICOMweb plugin, for tests and for trying the server on a PACS by hand.

Not the system service: our own process on a free loopback port with its storage and index in a folder the
caller owns, no DICOM (DIMSE) port anyone else uses, remote access off. Stopping it ends the process group.

    .venv/bin/python tests/orthanc.py /tmp/pacs      # starts Orthanc, uploads the synthetic studies, waits

Run so, it stops Orthanc on Ctrl-C, SIGTERM or SIGHUP (`serve_until_stopped`): Orthanc runs in its own session,
so a signal that ended only this script used to leave it running.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server_utils import free_port, stop_process_group, wait_until_up  # noqa: E402

PLUGIN_DIRS = ("/usr/share/orthanc/plugins", "/usr/lib/orthanc/plugins")
INSTALL = "apt-get install -y orthanc orthanc-dicomweb (Debian, as root; .ci/run does it)"


def orthanc_binary() -> tuple[str, str] | None:
    """(Orthanc executable, DICOMweb plugin) when both are installed, else None."""
    exe = shutil.which("Orthanc") or next((p for p in ("/usr/sbin/Orthanc", "/usr/bin/Orthanc")
                                           if os.access(p, os.X_OK)), None)
    plugin = next((str(p) for d in PLUGIN_DIRS for p in sorted(Path(d).glob("libOrthancDicomWeb.so*"))
                   if Path(d).is_dir()), None)
    return (exe, plugin) if exe and plugin else None


@dataclass
class Orthanc:
    url: str          # REST root, e.g. http://127.0.0.1:PORT
    proc: subprocess.Popen
    log: Path

    @property
    def dicomweb(self) -> str:
        return f"{self.url}/dicom-web"

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stow(self, files: list[Path]) -> None:
        """Upload the files with STOW-RS (one request), as a modality or a gateway would."""
        import pydicom
        from dicomweb_client import DICOMwebClient

        DICOMwebClient(self.dicomweb).store_instances([pydicom.dcmread(str(f)) for f in files])

    def stop(self) -> None:
        stop_process_group(self.proc, 20)


def start_orthanc(root: Path, timeout: float = 60.0) -> Orthanc:
    """Orthanc on a free loopback port with storage under `root`; waits until DICOMweb answers."""
    found = orthanc_binary()
    if found is None:
        raise RuntimeError(f"Orthanc with DICOMweb is not installed: {INSTALL}")
    exe, plugin = found
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = {
        "Name": "UMindTestPACS", "StorageDirectory": str(root / "storage"), "IndexDirectory": str(root / "index"),
        "HttpPort": port, "DicomPort": free_port(), "RemoteAccessAllowed": False, "AuthenticationEnabled": False,
        "Plugins": [plugin], "HttpTimeout": 30, "StorageCompression": False,
        "DicomWeb": {"Enable": True, "Root": "/dicom-web/", "EnableWado": True, "WadoRoot": "/wado",
                     "StudiesMetadata": "Full", "SeriesMetadata": "Full"},
    }
    from umind_core.atomic import write_text

    cfg = write_text(root / "orthanc.json", json.dumps(config, indent=1))
    log = root / "orthanc.log"
    cmd = ["nice", "-n", "10", exe, str(cfg)] if shutil.which("nice") else [exe, str(cfg)]
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    server = Orthanc(f"http://127.0.0.1:{port}", proc, log)

    def answers() -> bool:
        try:
            with urllib.request.urlopen(server.dicomweb + "/studies", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_until_up(proc, answers, timeout, 0.3, "Orthanc", "Orthanc's DICOMweb", server.stop, server.log_tail)
    except BaseException:  # a signal or Ctrl-C while it starts: Orthanc is in its own session, it goes too
        server.stop()
        raise
    return server


def exit_on_signals() -> None:
    """Turn SIGTERM and SIGHUP into SystemExit, as Ctrl-C is KeyboardInterrupt, so that `finally` runs. Python's
    default SIGTERM ends the process at once, without `finally`, and Orthanc is in another session where the
    signal does not reach it: it stayed running."""
    def on_signal(signum, frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)


def serve_until_stopped(start, stop) -> None:
    """`server = start()`, wait for SIGINT, SIGTERM or SIGHUP, then `stop(server)`; a signal while it starts stops it
    too (whatever start() had made, once it returns)."""
    exit_on_signals()
    server = None
    try:
        server = start()
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            stop(server)


def _start_with_studies(folder: Path) -> Orthanc:
    from pacs_studies import write_pacs_studies

    pacs = start_orthanc(folder)
    try:
        studies = write_pacs_studies(folder / "upload")
        pacs.stow([s.path for s in studies.values()])
    except BaseException:
        pacs.stop()
        raise
    print(f"Orthanc DICOMweb at {pacs.dicomweb} with {len(studies)} series; serve with:\n"
          f"  UMIND_STUDIES={pacs.dicomweb} scripts/serve.sh\nCtrl-C (or SIGTERM) stops it.", flush=True)
    return pacs


if __name__ == "__main__":
    serve_until_stopped(lambda: _start_with_studies(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/umind-pacs")),
                        Orthanc.stop)

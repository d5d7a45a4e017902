"""The security corpus, third round: code execution, disk and memory, replies without paths.

One server (auth off, so any client is every role) with its own temp dir (TMPDIR) and a small upload cap.
Every row is checked as in test_security_corpus.py (status, words of the message, no server path, the sentinel
tree beside the studies folder byte-identical, /info still answering), and the module ends with the checks
over the whole corpus: the server's temp dir holds what it held before, the marker file a smuggled payload
would create does not exist, and the train task is not stuck.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures_imaging import dicom_mono_multiframe  # noqa: E402
from server_utils import start_server  # noqa: E402
from test_security_corpus import LABEL, PNG, Case, _jpeg, build_tree, png, send, snapshot  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

UPLOAD_MB = 2


def payload_zip(marker: Path) -> bytes:
    """A ZIP holding `monailabel/__init__.py` that creates `marker` when Python imports it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("monailabel/__init__.py", f"open({str(marker)!r}, 'w').write('pwned')\n")
    return buf.getvalue()


def bomb_nifti() -> bytes:
    """10000 x 10000 float64 zeros as .nii.gz: under 1 MB on the wire, 800 MB decoded."""
    header = bytearray(348)
    header[0:4] = (348).to_bytes(4, "little")
    dims = [2, 10000, 10000, 1, 1, 1, 1, 1]
    header[40:56] = b"".join(d.to_bytes(2, "little") for d in dims)
    header[70:72] = (64).to_bytes(2, "little")  # datatype float64
    header[72:74] = (64).to_bytes(2, "little")  # bitpix
    header[76:108] = np.array([1.0] * 8, "<f4").tobytes()  # pixdim
    header[108:112] = np.array([352.0], "<f4").tobytes()  # vox_offset
    header[344:348] = b"n+1\x00"
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as comp:  # streamed: 8 MB of zeros at a time
        comp.write(bytes(header) + b"\x00" * 4)
        zeros = b"\x00" * (8 * 1024 * 1024)
        for _ in range(100):
            comp.write(zeros)
    return buf.getvalue()


def dicom_with_zip(root: Path, marker: Path) -> bytes:
    dicom_mono_multiframe(root / "plain.dcm", n=2)
    data = (root / "plain.dcm").read_bytes() + payload_zip(marker)
    (root / "plain.dcm").unlink()
    return data


def server_pid(server) -> int:
    """The Python process serving (the `monailabel` script's child, or itself)."""
    import psutil

    proc = psutil.Process(server.proc.pid)
    for p in [proc, *proc.children(recursive=True)]:
        if "python" in p.name().lower() and "start_server" in " ".join(p.cmdline()):
            return p.pid
    return proc.pid


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _no_path_anywhere(resp, server) -> None:
    text = resp.text
    assert str(server.root) not in text and str(server.tmp) not in text, text[:400]


def _no_marker(resp, server) -> None:
    assert not server.marker.exists()


def _labels_gone(resp, server) -> None:
    assert not list((server.studies / "labels").rglob("keep.*"))
    assert (server.studies / "keep.nii.gz").is_file() and not (server.studies / "keep.png").exists()


def cases(server) -> list[Case]:
    C = Case
    studies, marker = server.studies, server.marker
    smuggled = str(studies / "smuggled.png")
    png_zip = PNG + payload_zip(marker)
    bundle = {"bundle_path": smuggled}
    long_id = "\u00e9" * 150  # 150 characters, 300 bytes of UTF-8
    return [
        # ---- 1. code execution: the payload rides on an image, the path reaches a subprocess
        C("upload png with a zip appended", "PUT", "/datastore/image", 400, ("after the end",), {"image": "scan42"},
          files={"file": ("scan42.png", png_zip)}, check=_no_marker),
        C("upload jpeg with a zip appended", "PUT", "/datastore/image", 400, ("after the end",), {"image": "j42"},
          files={"file": ("j.jpg", _jpeg() + payload_zip(marker))}),
        C("upload dicom with a zip appended", "PUT", "/datastore/image", 400, ("after the end",), {"image": "d42"},
          files={"file": ("d.dcm", server.dicom_zip)}),
        C("infer upload png with a zip appended", "POST", "/infer/umind_segment", 400, ("after the end",), params={},
          files={"file": ("x.png", png_zip)}),
        C("scoring bundle_path", "POST", "/scoring/umind_uncertainty", 400, ("bundle_path", "not accepted"),
          json_body=bundle, check=_no_marker),
        C("train bundle_path", "POST", "/train/umind_lora", 400, ("bundle_path",), json_body=bundle, check=_no_marker),
        C("train all bundle_path", "POST", "/train/", 400, ("bundle_path",), json_body={"umind_lora": bundle}),
        C("batch infer bundle_path", "POST", "/batch/infer/umind_segment", 400, ("bundle_path",), json_body=bundle),
        C("train gpus", "POST", "/train/umind_lora", 400, ("gpus",), json_body={"gpus": "0,1"}),
        C("scoring unknown key", "POST", "/scoring/umind_uncertainty", 400, ("'evil'",), json_body={"evil": 1}),
        # ---- 7. training can't be wedged
        C("train 200 KB body", "POST", "/train/umind_lora", 400, ("bytes", "cap"),
          json_body={"lr": 1e-4, "rollback": "", "max_steps": 1, "seed": 0, "epochs": 1,
                     "score_tolerance": 0.02, "val_fraction": 0.2, "min_val": 1, "warmup_ratio": 0.05,
                     "batch_size": 1, "rehearsal": 0, "error_tolerance": 0.05, "gate_min_samples": 1,
                     "refusal_rate": 0.1, "rehearsal_min": 1, "rehearsal_pool": 1, "regression_size": 0,
                     "gate_noise_z": 0, "promote_tolerance": "x" * 200_000}),
        C("train malformed lr", "POST", "/train/umind_lora", 400, ("lr",), json_body={"lr": "fast"}),
        C("train rollback not a number", "POST", "/train/umind_lora", 400, ("rollback",), json_body={"rollback": "x"}),
        C("train body not an object", "POST", "/train/umind_lora", 422, (), json_body=[1, 2]),
        # ---- 2. disk: bodies capped, nothing left behind
        C("refused label leaves nothing", "PUT", "/datastore/label", 400, ("not a label map",),
          {"image": "img0", "tag": "final"}, files={"label": ("l.png", b"\x01" * 500_000)}),
        C("refused infer upload leaves nothing", "POST", "/infer/umind_segment", 400, (), params={},
          files={"file": ("r.png", b"\x02" * 500_000)}),
        C("dataset export", "GET", "/datastore/dataset", 200, (), check=_is_zip),
        # ---- 4. memory: a decompression bomb is refused from its header
        C("nifti decompression bomb", "PUT", "/datastore/image", 400, ("max_pixels",), {"image": "bomb"},
          files={"file": ("b.nii.gz", server.bomb)}),
        C("label decompression bomb", "PUT", "/datastore/label", 400, ("max_pixels",), {"image": "img0", "tag": "b"},
          files={"label": ("b.nii.gz", server.bomb)}),
        # ---- 5. images are replaced only on purpose
        C("re-upload an image with labels", "PUT", "/datastore/image", 409, ("keep", "final"), {"image": "keep"},
          files={"file": ("k.png", png(seed=21))}),
        C("replace an image with labels", "PUT", "/datastore/image", 200, (), {"image": "keep"},
          params={"replace": True}, files={"file": ("k.nii.gz", server.small_nifti)}, check=_labels_gone),
        # ---- 9. no server path in any reply
        C("info names no path", "GET", "/info/", 200, (), check=_no_path_anywhere),
        C("image info names no path", "GET", "/datastore/image/info", 200, (), {"image": "img1"},
          check=_no_path_anywhere),
        C("training listing names no path", "GET", "/datastore/", 200, (), {"output": "train"},
          check=_no_path_anywhere),
        C("active learning names no path", "POST", "/activelearning/random", 200, (), json_body={},
          check=_no_path_anywhere),
        C("logs are this server's, without paths", "GET", "/logs/", 200, (), {"lines": 2000},
          check=_own_log),
        # ---- 10. no bare 500s
        C("gpu info without nvidia-smi", "GET", "/logs/gpu", 404, ("nvidia-smi",)),
        C("multibyte id over 200 bytes", "PUT", "/datastore/image", 400, ("bytes",), {"image": long_id},
          files={"file": ("x.png", PNG)}),
    ]


def _is_zip(resp, server) -> None:
    with zipfile.ZipFile(io.BytesIO(resp.content)) as zf:
        assert any(n.endswith("keep.png") or n.endswith("img0.png") for n in zf.namelist()), zf.namelist()


def _own_log(resp, server) -> None:
    text = resp.text
    assert "/datastore/image" in text or "umind" in text, text[-500:]
    assert str(server.root) not in text and str(server.tmp) not in text


# ------------------------------------------------------------------------------------------------ the server
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from test_security_corpus import CAPS

    tmp = tmp_path_factory.mktemp("corpus3")
    root, model_dir = tmp / "wall", tmp / "model"
    studies, _ = build_tree(root, model_dir)
    server_tmp = tmp / "server-tmp"
    server_tmp.mkdir()
    marker = root / "sentinel" / "pwned"
    (studies / "keep.png").write_bytes(png(seed=20))
    (studies / "smuggled.png").write_bytes(PNG + payload_zip(marker))  # as if stored before this check
    (studies / "labels" / "final").mkdir(parents=True)
    (studies / "labels" / "final" / "keep.png").write_bytes(LABEL)
    conf = {"model": str(model_dir), "max_new_tokens": "4", "retrain_every": "1000", **CAPS,
            "max_upload_mb": str(UPLOAD_MB)}
    srv = start_server(studies, conf, tmp / "server.log",
                       env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false", "TMPDIR": str(server_tmp)})
    srv.root, srv.studies, srv.tmp, srv.marker = root, studies, server_tmp, marker
    srv.dicom_zip = dicom_with_zip(tmp, marker)
    srv.bomb = bomb_nifti()
    srv.small_nifti = _small_nifti(tmp)
    srv.before = snapshot(root)
    srv.tmp_before = sorted(p.name for p in server_tmp.iterdir())
    yield srv
    srv.stop()


def _small_nifti(tmp: Path) -> bytes:
    import SimpleITK as sitk

    sitk.WriteImage(sitk.GetImageFromArray((np.random.default_rng(5).random((96, 96)) * 255).astype(np.uint8)),
                    str(tmp / "s.nii.gz"), True)
    return (tmp / "s.nii.gz").read_bytes()


def _send(server, case: Case) -> requests.Response:
    if case.json_body is not None:
        return requests.request(case.method, server.url + case.path, params=case.query, json=case.json_body,
                                timeout=120)
    return send(server, case)


_NAMES = [c.name for c in cases(type("S", (), {"root": Path("/R"), "studies": Path("/R/s"), "marker": Path("/m"),
                                                "dicom_zip": b"", "bomb": b"", "small_nifti": b""})())]


@pytest.mark.parametrize("index", range(len(_NAMES)), ids=_NAMES)
def test_case(server, index):
    case = cases(server)[index]
    resp = _send(server, case)
    assert resp.status_code == case.expect, f"{case.name}: {resp.status_code} {resp.text[:300]}"
    if case.expect >= 400 and resp.headers.get("content-type", "").startswith("application/json"):
        detail = resp.json()["detail"]
        if case.expect != 422:
            assert isinstance(detail, str), detail
        for word in case.words:
            assert word.lower() in str(detail).lower(), f"{case.name}: {word!r} not in {detail!r}"
        assert str(server.root) not in str(detail) and str(server.tmp) not in str(detail), detail
    if case.check:
        case.check(resp, server)
    assert server.get_json("/info/", timeout=30)["name"]
    assert snapshot(server.root) == server.before, f"{case.name} changed files beside the studies folder"


def _raw(server, head: str, body_chunks=()) -> tuple[int, str]:
    """Send a request over a plain socket (the client may stop sending once answered); (status, body)."""
    host, port = server.url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode())
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the whole body was sent
        data = b""
        try:
            while True:
                part = sock.recv(65536)
                if not part:
                    break
                data += part
        except (ConnectionResetError, socket.timeout):
            pass
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return status, data.partition(b"\r\n\r\n")[2].decode(errors="replace")


@pytest.mark.parametrize("path", ["/datastore/image?image=huge", "/datastore/label?image=img0&tag=final",
                                  "/infer/umind_segment"])
def test_a_body_announced_over_the_cap_is_413_before_it_is_read(server, path):
    method = "POST" if path.startswith("/infer") else "PUT"
    size = UPLOAD_MB * 1024 * 1024 + 1
    status, body = _raw(server, f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
                                f"boundary=b\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n")
    assert status == 413 and "max_upload_mb" in body, (status, body)


def test_a_streamed_body_over_the_cap_is_413(server):
    """No Content-Length (chunked): the cap is checked while the body streams."""
    part = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="x.png"\r\n'
            b"Content-Type: image/png\r\n\r\n")
    chunk = b"\x00" * (256 * 1024)
    framed = [f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in [part] + [chunk] * (UPLOAD_MB * 4 + 4)]
    head = ("PUT /datastore/image?image=chunked HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
            "boundary=b\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    status, body = _raw(server, head, framed)
    assert status == 413 and "max_upload_mb" in body, (status, body)


def test_bomb_costs_the_server_less_than_200_mb(server):
    pid = server_pid(server)
    before = peak_rss_mb(pid)
    for _ in range(2):
        resp = requests.put(f"{server.url}/datastore/image?image=bomb2", files={"file": ("b.nii.gz", server.bomb)},
                            timeout=120)
        assert resp.status_code == 400 and "max_pixels" in resp.json()["detail"]
    assert peak_rss_mb(pid) - before < 200, (before, peak_rss_mb(pid))


def test_scoring_runs_in_its_subprocess_and_reports_without_paths(server):
    """A real scoring task through the replaced subprocess starter: DONE, details scrubbed, no payload run
    although a smuggled PNG+ZIP lies in the studies folder."""
    resp = requests.post(f"{server.url}/scoring/umind_uncertainty", json={}, timeout=60)
    assert resp.status_code == 200, resp.text
    deadline = time.monotonic() + 600
    status = {}
    while time.monotonic() < deadline:
        status = requests.get(f"{server.url}/scoring/", timeout=30).json()
        if status.get("status") in ("DONE", "ERROR"):
            break
        time.sleep(1)
    assert status.get("status") == "DONE", status
    text = json.dumps(status)
    assert str(server.root) not in text and "Traceback" not in text and "bundle_path" not in text
    assert not server.marker.exists()
    assert not list((server.studies / ".umind" / "tasks").glob("*.json"))  # the request file is gone


def test_nothing_stays_in_the_temp_dir_and_training_is_not_stuck(server):
    time.sleep(1.0)  # background removals run after the reply
    assert sorted(p.name for p in server.tmp.iterdir()) == server.tmp_before
    status = requests.get(f"{server.url}/train/", timeout=30)
    assert status.status_code == 404 or status.json().get("status") not in ("SUBMITTED",), status.text
    assert not server.marker.exists()
    # the retrain trigger is not deferred by a wedged run: a label save still counts
    arr = np.zeros((256, 256), np.uint8)
    arr[5:20, 5:20] = 1
    buf = io.BytesIO()
    from PIL import Image

    Image.fromarray(arr).save(buf, format="PNG")
    resp = requests.put(f"{server.url}/datastore/label?image=img1&tag=final",
                        files={"label": ("l.png", buf.getvalue())}, timeout=60)
    assert resp.status_code == 200 and "deferred" not in json.dumps(resp.json()), resp.text


def test_a_subprocess_gets_neither_bundle_path_nor_the_request_on_its_command_line(monkeypatch, tmp_path):
    """Unit level, whatever reaches the starter: env and argv are the server's own."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))
    from lib.wall import task_process

    seen = {}

    class FakePopen:
        def __init__(self, cmd, env=None, **kwargs):
            seen["cmd"], seen["env"] = cmd, env
            seen["request"] = json.loads(Path(cmd[-1]).read_text())
            seen["mode"] = Path(cmd[-1]).stat().st_mode & 0o777
            self.stdout = io.StringIO("[x] working\nKeyError: an earlier, handled one\n"
                                      "Traceback (most recent call last):\n  File \"/srv/a.py\"\n"
                                      "ValueError: bad thing in /srv/a.py " + "z" * 2000 + "\n")
            self.returncode = 1

        def wait(self):
            return 1

    monkeypatch.setattr(task_process.subprocess, "Popen", FakePopen)
    task_process._state["workdir"] = tmp_path
    big = "y" * 300_000
    task = {"id": "t1", "request": {"model": "umind_lora", "bundle_path": "/evil.zip", "gpus": "0", "note": big},
            "status": "SUBMITTED"}
    task_process.run_task(task, "train")
    assert "/evil.zip" not in seen["env"].get("PYTHONPATH", "") and "CUDA_VISIBLE_DEVICES" not in seen["env"]
    assert all(big not in part and "evil" not in part for part in seen["cmd"])
    assert "bundle_path" not in seen["request"] and "gpus" not in seen["request"] and seen["request"]["note"] == big
    assert seen["mode"] == 0o600  # the request file is the server's alone
    assert task["status"] == "ERROR" and task["error"].startswith("ValueError: bad thing")  # the last exception
    assert len(task["error"]) <= 500
    assert not any("Traceback" in d or 'File "' in d for d in task["details"])
    assert not list(tmp_path.glob("tasks/*.json"))


def test_the_child_reads_and_deletes_its_request_file_before_monai_label_runs(tmp_path):
    """CHILD_CODE run for real, with a stand-in for MONAI Label's runner: the request reaches it as -r, and the
    file holding it is gone by then (a request may carry paths and settings nobody else should read)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))
    from lib.wall.task_process import CHILD_CODE

    app = tmp_path / "fake" / "monailabel" / "interfaces" / "utils"
    app.mkdir(parents=True)
    for folder in (app.parent.parent, app.parent, app):
        (folder / "__init__.py").write_text("")
    (app / "app.py").write_text("import sys, json, os\n"
                                "def run_main():\n"
                                "    print(json.dumps({'argv': sys.argv[1:], 'left': os.listdir(os.environ['TASKS'])}))\n")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    request = tasks / "r.json"
    request.write_text('{"model": "umind_lora"}')
    out = subprocess.run([sys.executable, "-c", CHILD_CODE, "train", str(request)], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "TASKS": str(tasks)})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["argv"] == ["-m", "train", "-r", '{"model": "umind_lora"}'] and seen["left"] == []


def test_a_task_that_cannot_start_fails_with_its_reason(monkeypatch, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))
    from lib.wall import task_process

    def refuse(*args, **kwargs):
        raise OSError(7, "Argument list too long")

    monkeypatch.setattr(task_process.subprocess, "Popen", refuse)
    task_process._state["workdir"] = tmp_path
    done = []
    task = {"id": "t2", "request": {"model": "umind_lora"}, "status": "SUBMITTED"}
    task_process.run_task(task, "train", callback=done.append)
    assert task["status"] == "ERROR" and "could not start" in task["error"] and done == [task]


def test_a_task_stopped_before_it_starts_never_starts(monkeypatch, tmp_path):
    """DELETE /train/ while the task still waits in the queue: STOPPED is the answer, and no process follows."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))
    from lib.wall import task_process
    from monailabel.utils.async_tasks import utils as stock

    started = []
    monkeypatch.setattr(task_process.subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setattr(task_process, "_STOCK_STOP", lambda method: None)  # no process registered yet
    task = {"id": "t3", "request": {"model": "umind_lora"}, "status": "SUBMITTED"}
    monkeypatch.setitem(stock.background_tasks, "train", [task])
    assert task_process.stop_task("train") is task and task["status"] == "STOPPED"
    task_process._state["workdir"] = tmp_path
    task_process.run_task(task, "train")
    assert started == [] and task["status"] == "STOPPED"

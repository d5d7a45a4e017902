"""The README's "Train on your own data" commands, copied from the README and run as written.

Why: a new user's path from a downloaded dataset to a served fine-tuned model is five commands; if any of them
drifts from what the CLI or serve.sh accept, the guide is wrong even when every module's own tests pass. Only
the placeholders change: `~` is a temporary home holding two nnU-Net folders, MODEL is the bundled demo model,
/data/studies is a temporary studies folder, and serve.sh is called by its absolute path on a free port.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image
from server_utils import free_port, stop_process_group, wait_until_up

pytestmark = pytest.mark.slow  # the README's own-data commands train and serve a model

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Train on your own data"


def readme_commands() -> list[str]:
    """The bash block under SECTION, one command a line, comments dropped."""
    text = (ROOT / "README.md").read_text()
    body = text.split(SECTION, 1)[1]
    block = re.search(r"```bash\n(.*?)```", body, re.DOTALL)
    assert block, f"no bash block under {SECTION!r}"
    return [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def _nnunet(folder: Path, seeds: range) -> None:
    """An nnU-Net v2 raw folder of synthetic thyroid scans: thyroid = 1, thyroid nodule = 2."""
    from umind_core.data.synthetic import generate

    (folder / "imagesTr").mkdir(parents=True)
    (folder / "labelsTr").mkdir()
    (folder / "dataset.json").write_text(json.dumps({
        "labels": {"background": 0, "thyroid": 1, "thyroid_nodule": 2}, "file_ending": ".png",
        "channel_names": {"0": "US"}, "numTraining": len(seeds)}))
    for seed in seeds:
        sample = generate(seed, site="thyroid", size=128)
        label = np.zeros(sample.image.shape, np.uint8)
        for obj in sorted(sample.objects, key=lambda o: "nodule" in o.label):  # nodules painted over the gland
            label[obj.mask] = 2 if "nodule" in obj.label else 1
        Image.fromarray(sample.image).save(folder / "imagesTr" / f"case{seed}_0000.png")
        Image.fromarray(label).save(folder / "labelsTr" / f"case{seed}.png")


def _substitute(command: str, studies: Path) -> str:
    command = command.replace("scripts/serve.sh", shlex.quote(str(ROOT / "scripts" / "serve.sh")))
    command = command.replace("/data/studies", shlex.quote(str(studies)))
    return re.sub(r"--model MODEL\b", "--model " + shlex.quote(str(ROOT / "umind_core" / "demo_model")), command)


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """A new user's machine: a home with two downloaded datasets, a working folder, the CLI on PATH."""
    home = tmp_path_factory.mktemp("home")
    _nnunet(home / "data" / "Dataset501_Thyroid", range(20, 26))
    _nnunet(home / "data" / "Thyroid_heldout", range(40, 43))
    work = home / "work"
    work.mkdir()
    studies = home / "studies"
    studies.mkdir()
    Image.open(home / "data" / "Thyroid_heldout" / "imagesTr" / "case40_0000.png").save(studies / "study1.png")
    env = {**os.environ, "HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return {"home": home, "work": work, "studies": studies, "env": env}


def test_the_guide_is_five_commands_in_the_documented_order():
    commands = readme_commands()
    assert len(commands) == 5, commands
    assert [c.split()[1] if c.startswith("umind ") else "serve" for c in commands] == \
        ["import", "import", "train", "eval", "serve"]


def test_commands_one_to_four_import_train_and_evaluate(user):
    for command in readme_commands()[:4]:
        done = subprocess.run(["bash", "-c", _substitute(command, user["studies"])], cwd=user["work"],
                              env=user["env"], capture_output=True, text=True, timeout=1200, check=False)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    work = user["work"]
    train = [json.loads(line) for line in (work / "data/thyroid/train.jsonl").read_text().splitlines()]
    assert len(train) == 6 and all(r["annotations"]["objects"] for r in train)
    final = work / "runs/thyroid/final"
    assert (final / "umind_config.json").is_file() and any(final.rglob("adapter_model.safetensors"))
    metrics = json.loads((work / "eval/thyroid/metrics.json").read_text())
    assert (work / "eval/thyroid/report.md").is_file()
    seg = metrics["metrics"]["segmentation"]
    assert seg["n"] >= 3 and 0.0 <= seg["mean"] <= 1.0, seg  # the three held-out glands, scored
    assert {s["id"] for s in metrics["samples"]} == {"case40", "case41", "case42"}


def test_command_five_serves_the_fine_tuned_model(user):
    final = user["work"] / "runs/thyroid/final"
    if not final.is_dir():
        pytest.skip("commands 1-4 did not leave a model (their test reports why)")
    port = free_port()
    log = user["home"] / "serve.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(["bash", "-c", _substitute(readme_commands()[4], user["studies"])],
                                cwd=user["work"], env={**user["env"], "PORT": str(port)}, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(url + "/info/", timeout=5):
                return True
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    tail = lambda: log.read_text(errors="replace")[-3000:]
    try:
        wait_until_up(proc, answers, 300, 0.5, "serve.sh", "server /info",
                      lambda: stop_process_group(proc, 15), tail)
        info = requests.get(url + "/info/", timeout=30).json()
        assert info["umind"]["model"] == "thyroid/final" and info["umind"]["model_version"].startswith("saved ")
        resp = requests.post(f"{url}/infer/umind_segment?image=study1&output=json",
                             data={"params": json.dumps({"prompt": "thyroid"})}, timeout=300)
        assert resp.status_code == 200, resp.text
        assert "umind" in resp.json()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        stop_process_group(proc, 30)
    assert "clients connect to http://127.0.0.1:" in log.read_text()

"""The browser viewer on studies of 800x600: from the Run key to the answer drawn, over HTTP, on this machine.

Starts the real server with the shipped demo model (or --model DIR) on --repeats 800x600 PNG studies (synthetic
breast scans resized, one seed each), opens /viewer/ in headless Chromium at 800x600, and on each study, opened
fresh, presses Enter for segment, then detect, then measure, as an annotator would: the first task on a study pays
for reading the image, the next ones reuse the server's cached image. The page's own timer runs from the key to
two animation frames after the mask and the answers are drawn (`window.umind.ui.lastTiming`), so it includes the
request, the server's inference, NRRD decoding, the labelmap upload and the render; the server's own `latencies`
in the same reply give the viewer's share (the rest: HTTP, decoding, drawing). It also times a fresh build of the viewer (`scripts/web.sh` with empty
build and npm caches: `npm ci` downloads every package from the registry, then esbuild) and a reused one.

    .venv/bin/python benchmarks/bench_viewer.py [--model DIR] [--repeats 7] [--decode static]
        [--out benchmarks/results/viewer/viewer_timing.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
GOAL_S = 1.5
TASKS = (("segment", "breast lesion"), ("detect", "breast lesion"), ("measure", "breast lesion long axis"))


def _build_times(tmp: Path) -> dict:
    # an empty npm cache too: every package comes from the registry, as on a fresh CI machine
    env = {**os.environ, "UMIND_WEB_CACHE": str(tmp / "web-cache"), "npm_config_cache": str(tmp / "npm-cache")}
    t0 = time.perf_counter()
    subprocess.run(["bash", str(ROOT / "scripts" / "web.sh")], env=env, check=True, capture_output=True)
    fresh = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run(["bash", str(ROOT / "scripts" / "web.sh")], env=env, check=True, capture_output=True)
    reused = time.perf_counter() - t0
    info = json.loads((ROOT / "web" / "dist" / "build-info.json").read_text())
    return {"fresh_s": round(fresh, 2), "reused_s": round(reused, 3), "esbuild_s": info["seconds"],
            "dist_bytes": info["bytes"]}


def _studies(folder: Path, n: int) -> list[str]:
    from PIL import Image

    from umind_core.data.synthetic import generate

    folder.mkdir(parents=True)
    ids = [f"us800_{k}" for k in range(n + 1)]  # the first one warms the server up
    for k, image_id in enumerate(ids):
        image = Image.fromarray(generate(seed=1_000_001 + k, site="breast", size=512).image).resize((800, 600))
        image.save(folder / f"{image_id}.png")
    return ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--decode", default="static", help="the server's decode conf (its default, auto, tunes in "
                                                        "the background for minutes after a start)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "viewer" / "viewer_timing.json"))
    args = ap.parse_args()
    from umind_core.testing.server import start_server
    from viewer_page import ViewerPage

    tmp = Path(tempfile.mkdtemp(prefix="umind_bench_viewer_"))
    build = _build_times(tmp)
    ids = _studies(tmp / "studies", args.repeats)
    conf = {"workdir": str(tmp / "work"), "retrain_every": "0", "decode": args.decode}
    if args.model:
        conf["model"] = args.model
    srv = start_server(tmp / "studies", conf, tmp / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"},
                       timeout=300)
    page = ViewerPage.start(srv.url, tmp / "profile", tmp / "shots")
    times = {task: [] for task, _ in TASKS}
    server = {task: [] for task, _ in TASKS}
    try:
        for k, image_id in enumerate(ids):
            page.open(f"image={image_id}")
            for task, prompt in TASKS:
                params = page.run(task=task, prompt=prompt)
                if k:  # not the warm-up study
                    times[task].append(page.b.js("window.umind.ui.lastTiming.total_ms") / 1000)
                    server[task].append(float(params["latencies"]["total"]))
    finally:
        page.close()
        srv.stop()
    rows = {}
    for task, _ in TASKS:
        med = statistics.median(times[task])
        rows[task] = {"viewer_s": [round(v, 3) for v in times[task]], "viewer_median_s": round(med, 3),
                      "server_median_s": round(statistics.median(server[task]), 3),
                      "viewer_share_median_s": round(statistics.median(
                          v - sv for v, sv in zip(times[task], server[task])), 3),
                      "goal_ratio": round(med / GOAL_S, 2)}
        print(f"{task}: answered and drawn in {med:.2f} s (median of {len(times[task])} studies; the server's own "
              f"latency {rows[task]['server_median_s']:.2f} s; {med / GOAL_S:.2f} of the {GOAL_S} s goal)")
    out = {"study": "800x600 PNG (synthetic breast, resized), a new study for each repeat", "decode": args.decode, "repeats": args.repeats,
           "model": args.model or "umind_core/demo_model", "cores": os.cpu_count(), "build": build, "tasks": rows}
    print(f"build: fresh {build['fresh_s']} s (esbuild {build['esbuild_s']} s), reused {build['reused_s']} s, "
          f"{build['dist_bytes'] / 1e6:.1f} MB")
    from umind_core.atomic import write_text

    write_text(Path(args.out), json.dumps(out, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

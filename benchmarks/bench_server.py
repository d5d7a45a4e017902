"""What the MONAI Label server adds to one `umind_segment` call: HTTP round trip vs a direct Predictor call.

Starts the real server (tiny model, or --model DIR) on a free loopback port, sends the same PNG repeatedly
through /infer/umind_segment and times the same prompt with a Predictor in this process. Prints both medians
and the overhead in ms (multipart encoding, image read, label-map write, the app's bookkeeping).

    .venv/bin/python benchmarks/bench_server.py [--model DIR] [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_image  # noqa: E402
from server_utils import start_server  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="UMind folder (default: a fresh tiny model)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args(argv)

    import requests
    from PIL import Image

    from umind_core.imageio import read_image
    from umind_core.modeling.umind import UMindVL
    from umind_core.predictor import Predictor

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        studies = root / "studies"
        studies.mkdir()
        Image.fromarray(make_image(0)).save(studies / "img.png")
        model_dir = args.model
        if model_dir is None:
            from umind_core.modeling.tiny import build_model

            model_dir = str(root / "model")
            build_model("tiny").save_pretrained(model_dir)
        conf = {"model": model_dir, "workdir": str(root / "work"), "max_new_tokens": str(args.max_new_tokens),
                "retrain_every": "0"}
        server = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
        try:
            http, app_side = [], []
            for i in range(args.repeats + 2):  # the first two calls load and warm the model: not timed
                t0 = time.perf_counter()
                r = requests.post(f"{server.url}/infer/umind_segment?image=img",
                                  data={"params": json.dumps({"prompt": "lesion"})}, timeout=300)
                r.raise_for_status()
                if i >= 2:
                    http.append(time.perf_counter() - t0)
                    lat = json.loads(r.text)["latencies"] if "json" in r.headers["content-type"] else None
                    if lat is None:  # multipart: read the params part
                        from requests_toolbelt.multipart import decoder

                        part = next(p for p in decoder.MultipartDecoder(r.content, r.headers["content-type"]).parts
                                    if b'name="params"' in p.headers.get(b"Content-Disposition", b""))
                        lat = json.loads(part.text)["latencies"]
                    app_side.append(lat["total"] - lat["infer"])
        finally:
            server.stop()
        predictor = Predictor(UMindVL.from_pretrained(model_dir), max_new_tokens=args.max_new_tokens)
        frame = read_image(studies / "img.png")
        direct = []
        for i in range(args.repeats + 2):
            t0 = time.perf_counter()
            predictor.predict_batch([frame], "segment", "lesion")
            if i >= 2:
                direct.append(time.perf_counter() - t0)
    h, d = statistics.median(http) * 1000, statistics.median(direct) * 1000
    print(f"umind_segment over HTTP: median {h:.1f} ms  ({args.repeats} calls)")
    print(f"direct Predictor call:   median {d:.1f} ms")
    print(f"server overhead:         {h - d:.1f} ms  (of which the app's own read/write/bookkeeping: "
          f"{statistics.median(app_side) * 1000:.1f} ms; the rest is HTTP, multipart and machine noise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

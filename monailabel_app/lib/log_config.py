"""Each server's MONAI Label log in its own workdir, not in the checkout every server shares.

`monailabel start_server` without ``--log_config`` writes its log to ``<app dir>/logs/app.log``: every server started
from one checkout (a test server beside the team's, two studies folders) appends to the same file, and a service
user whose checkout is read-only (``/opt/umind`` owned by root) cannot start at all. scripts/serve.sh runs this module
before it starts the server: it checks the ``--conf`` pairs (`conf.check_command_line`, one line and exit 2 on a
bad one), writes MONAI Label's own logging config with its file handlers pointed at ``<workdir>/logs/monailabel.log``
(`write_log_config`; beside the app's ``server.log`` of wall/server_log.py, which ``/logs`` serves) and prints that
config's path for ``--log_config``.

    python -m monailabel_app.lib.log_config STUDIES [start_server arguments...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from umind_core.atomic import write_text

__all__ = ["LOG_FILE", "CONFIG_FILE", "write_log_config", "main"]

#: MONAI Label's log (requests, tasks) in the workdir; the app's own log there is server.log
LOG_FILE = "monailabel.log"
CONFIG_FILE = "logging.json"


def _stock_config() -> dict:
    """MONAI Label's logging.json (the file `init_log_config` copies), with its ${LOGFILE} placeholders."""
    import monailabel

    return json.loads((Path(monailabel.__file__).parent / "logging.json").read_text(encoding="utf-8"))


def write_log_config(workdir: str | Path) -> Path:
    """<workdir>/logs/logging.json: MONAI Label's config with every file handler writing <workdir>/logs/LOG_FILE."""
    logs = Path(workdir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    config = _stock_config()
    for handler in config.get("handlers", {}).values():
        if "filename" in handler:
            handler["filename"] = str(logs / LOG_FILE)
    path = logs / CONFIG_FILE
    write_text(path, json.dumps(config, indent=2) + "\n")
    return path


def main(argv: list[str]) -> int:
    from .conf import ConfError, check_command_line, parse_conf

    if not argv:
        print("usage: python -m monailabel_app.lib.log_config STUDIES [start_server arguments...]", file=sys.stderr)
        return 2
    studies, args = argv[0], argv[1:]
    line = check_command_line(args, studies)
    if line:
        print(line, file=sys.stderr)
        return 2
    conf = {args[k + 1]: args[k + 2] for k in range(len(args) - 2) if args[k] == "--conf"}
    try:
        workdir = parse_conf(conf, studies).workdir
        print(write_log_config(workdir))
    except (ConfError, OSError) as exc:
        print(f"umind: cannot write the server's log config: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The real-server helpers, for tests: they live in `umind_core.testing.server`, where benchmarks import them
as a package; this module keeps `from server_utils import start_server` working in tests/ (and in
tests/orthanc.py and tests/browser.py, which run as scripts too)."""

from __future__ import annotations

from umind_core.testing.server import (  # noqa: F401
    APP_DIR,
    REPO,
    Server,
    free_port,
    same_reply,
    start_server,
    stop_process_group,
    wait_until_up,
)

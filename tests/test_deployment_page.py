"""The deployment page covers Keycloak's install and hostname, an internal CA (server and Slicer), the
realm's backup and restore, the service user's home and its logs; one decode mode in the unit and the README; one
status for an unreachable realm in every page that names one."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = (ROOT / "docs" / "deployment.md").read_text()
sys.path.insert(0, str(ROOT / "monailabel_app"))


def test_unit_file_decode_mode_is_the_documented_default():
    from umind_core.inference.fast_decode import DECODE_MODES

    (exec_start,) = [ln for ln in DEPLOY.splitlines() if ln.startswith("ExecStart=")]
    unit_mode = re.search(r"--conf decode (\w+)", exec_start).group(1)
    readme = (ROOT / "README.md").read_text()
    conf_doc = (ROOT / "docs" / "configuration.md").read_text()
    readme_mode = re.search(r"The default decode \(`(\w+)`\)", readme).group(1)
    conf_mode = re.search(r"\| `decode` \| `(\w+)`", conf_doc).group(1)
    assert unit_mode == readme_mode == conf_mode == "auto" and unit_mode in DECODE_MODES


def test_page_covers_keycloak_ca_realm_backup_home_and_logs():
    from lib.log_config import LOG_FILE
    from lib.wall.server_log import LOG_NAME

    for needle in ("KC_HOSTNAME", "KC_PROXY_HEADERS", "MONAI_LABEL_AUTH_REALM_URI", "REQUESTS_CA_BUNDLE",
                   "SSL_CERT_FILE", "update-ca-certificates", "kc.sh export", "kc.sh import", "--users realm_file",
                   "--create-home", "Environment=HOME=", f"WORKDIR/logs/{LOG_NAME}", f"WORKDIR/logs/{LOG_FILE}",
                   "--log_config"):
        assert needle in DEPLOY, needle
    assert "Slicer" in DEPLOY.split("## Trusting an internal CA")[1].split("## Backups")[0]


def test_one_status_for_an_unreachable_realm():
    pages = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")} | {"README.md": (ROOT / "README.md")
                                                                             .read_text()}
    for name, text in pages.items():
        flat = " ".join(text.split())
        assert not re.search(r"unreachable realm (?:is |answers )?(?:a )?502", flat), name
        assert not re.search(r"realm (?:the server )?cannot (?:be )?reach\w* answers 502", flat), name
    assert "A realm the\nserver cannot reach answers **503**, on every route" in DEPLOY
    assert "an unreachable realm a 503" in (ROOT / "docs" / "api.md").read_text()

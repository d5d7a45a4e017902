#!/usr/bin/env bash
# The README's main command: sets up .venv when missing (scripts/env.sh), writes synthetic sample studies on the
# first run, and starts the MONAI Label server with the UMind app on 127.0.0.1.
#   scripts/serve.sh                       # synthetic sample studies, port 8000
#   UMIND_STUDIES=/data/us PORT=8080 scripts/serve.sh --conf model /models/umind
#   UMIND_STUDIES=http://pacs:8042/dicom-web scripts/serve.sh   # a PACS over DICOMweb (README "Studies from a PACS")
# Extra arguments go to `monailabel start_server` (e.g. --conf retrain_every 5).
# Security: binds 127.0.0.1. `--host ADDR` for another address is refused unless MONAI Label's auth is on
# (MONAI_LABEL_AUTH_ENABLE=true with MONAI_LABEL_AUTH_REALM_URI) or UMIND_ALLOW_OPEN=1 says so explicitly.
# CORS allows no other origin unless --conf cors_origins lists some (the app sets it: lib/cors.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HOST=127.0.0.1
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --host) HOST="${2:?--host needs an address}"; shift 2 ;;
    --host=*) HOST="${1#--host=}"; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
case "$HOST" in
  127.*|localhost|::1) ;;
  *)
    AUTH="$(printf '%s' "${MONAI_LABEL_AUTH_ENABLE:-false}" | tr '[:upper:]' '[:lower:]')"
    if [ "$AUTH" != "true" ] && [ "$AUTH" != "1" ] && [ "${UMIND_ALLOW_OPEN:-0}" != "1" ]; then
      echo "umind: refusing to bind $HOST without auth: anyone who can reach it could read, write and delete" \
           "studies, labels and models. Turn on MONAI Label's auth (MONAI_LABEL_AUTH_ENABLE=true," \
           "MONAI_LABEL_AUTH_REALM_URI=...), or set UMIND_ALLOW_OPEN=1 if the network is trusted." >&2
      exit 2
    fi ;;
esac
source "$ROOT/scripts/env.sh"
# outside the source tree: the app keeps adapter versions under STUDIES/.umind and refuses the repository
STUDIES="${UMIND_STUDIES:-${XDG_DATA_HOME:-$HOME/.local/share}/umind/sample-studies}"
PORT="${PORT:-8000}"
cd "$ROOT"
case "$STUDIES" in
  http://*|https://*)  # a PACS: no studies folder to hold the workdir (versions, the PACS cache), so give it one
    case " ${ARGS[*]-} " in
      *" workdir "*) ;;
      *) ARGS+=(--conf workdir "${XDG_DATA_HOME:-$HOME/.local/share}/umind/pacs-work") ;;
    esac ;;
esac
if [ -z "${UMIND_STUDIES:-}" ]; then
  python -m monailabel_app.samples "$STUDIES"
fi
cat <<MSG
umind: serving $STUDIES at http://$HOST:$PORT
  3D Slicer: add $ROOT/slicer_module/UMind under Edit > Application Settings > Modules > Additional module
  paths, restart, open Ultrasound > UMind and connect to http://127.0.0.1:$PORT
  The stock MONAILabel extension shows umind_segment (targets = the /info labels, --conf labels),
  umind_detect (ROIs) and umind_interactive (clicks, ROI); landmarks, measurements and diagnosis/report/
  questions need the UMind module. Details: README, "The stock MONAILabel extension".
MSG
exec monailabel start_server --app "$ROOT/monailabel_app" --studies "$STUDIES" --host "$HOST" --port "$PORT" \
  ${ARGS[@]+"${ARGS[@]}"}

#!/usr/bin/env bash
# The README's main command: sets up .venv when missing (scripts/env.sh), writes synthetic sample studies on the
# first run, and starts the MONAI Label server with the UMind app on 127.0.0.1.
#   scripts/serve.sh                       # synthetic sample studies, port 8000
#   UMIND_STUDIES=/data/us PORT=8080 scripts/serve.sh --conf model /models/umind
#   UMIND_STUDIES=http://pacs:8042/dicom-web scripts/serve.sh   # a PACS over DICOMweb (docs/pacs-ohif.md)
# Extra arguments go to `monailabel start_server` (e.g. --conf retrain_every 5).
# It prints the address clients should use: for a wildcard bind (--host 0.0.0.0 or ::) the machine's first
# non-loopback IP and its hostname, since 127.0.0.1 reaches only this machine. UMIND_DRY_RUN=1 prints that and
# the command, and exits without setting anything up.
# Security: binds 127.0.0.1. `--host ADDR` for another address is refused unless MONAI Label's auth is on
# (MONAI_LABEL_AUTH_ENABLE=true with MONAI_LABEL_AUTH_REALM_URI) or UMIND_ALLOW_OPEN=1 says so explicitly.
# CORS allows no other origin unless --conf cors_origins lists some (the app sets it: monailabel_app/lib/wall/cors.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HOST=127.0.0.1
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --host) HOST="${2:?--host needs an address}"; shift 2 ;;
    --host=*) HOST="${1#--host=}"; shift ;;
    # a relative model or workdir means the folder where the command was typed, not the checkout we cd into below
    --conf)
      if [ $# -ge 3 ] && { [ "$2" = model ] || [ "$2" = workdir ]; } && [ -n "$3" ] && [ "${3#/}" = "$3" ] \
         && [ "${3#\~}" = "$3" ]; then
        ARGS+=("$1" "$2" "$PWD/$3"); shift 3
      else
        ARGS+=("$1"); shift
      fi ;;
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
# The host part of the URL clients use: the bind address, or for a wildcard bind the first non-loopback address
# (IPv6 in brackets), else the hostname.
client_host() {
  case "$1" in
    0.0.0.0|::|"[::]")
      local ip
      ip="$( { hostname -I 2>/dev/null || ip -o addr show scope global 2>/dev/null | awk '{sub(/\/.*/, "", $4); print $4}'; } \
             | tr ' ' '\n' | grep -v -e '^$' -e '^127\.' -e '^::1$' -e '^fe80:' | head -n 1 || true)"
      if [ -n "$ip" ]; then
        case "$ip" in *:*) echo "[$ip]" ;; *) echo "$ip" ;; esac
      else
        hostname 2>/dev/null || echo localhost
      fi ;;
    *:*) case "$1" in \[*) echo "$1" ;; *) echo "[$1]" ;; esac ;;
    *) echo "$1" ;;
  esac
}
PORT="${PORT:-8000}"
CLIENT_URL="http://$(client_host "$HOST"):$PORT"
case "$HOST" in
  0.0.0.0|::|"[::]") ALSO="  (or http://$(hostname 2>/dev/null || echo localhost):$PORT by name)" ;;
  *) ALSO="" ;;
esac
if [ "${UMIND_DRY_RUN:-0}" = "1" ]; then
  echo "umind: clients connect to $CLIENT_URL$ALSO"
  echo "umind: would run: monailabel start_server --app $ROOT/monailabel_app --host $HOST --port $PORT ${ARGS[*]-}"
  exit 0
fi
source "$ROOT/scripts/env.sh"
# outside the source tree: the app keeps adapter versions under STUDIES/.umind and refuses the repository
STUDIES="${UMIND_STUDIES:-${XDG_DATA_HOME:-$HOME/.local/share}/umind/sample-studies}"
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
# the browser viewer at /viewer/ (built once, then reused); the server runs without it
VIEWER="  Browser: $CLIENT_URL/viewer/ (segment, correct with the brush, submit, next sample)"
bash "$ROOT/scripts/web.sh" >&2 || VIEWER="  Browser viewer not built (needs node and npm: apt-get install nodejs npm)"
# A bad --conf (a model folder that is not there) is one line here, not a traceback from MONAI Label's app loader;
# and this server logs to WORKDIR/logs/monailabel.log, not to the checkout's monailabel_app/logs/app.log that every
# server started from it would share (lib/log_config.py).
LOG_CONFIG="$(python -m monailabel_app.lib.log_config "$STUDIES" ${ARGS[@]+"${ARGS[@]}"})" || exit 2
case " ${ARGS[*]-} " in
  *" --log_config "*|*" -l "*) ;;
  *) ARGS+=(--log_config "$LOG_CONFIG") ;;
esac
cat <<MSG
umind: serving $STUDIES on $HOST port $PORT
umind: clients connect to $CLIENT_URL$ALSO
$VIEWER
  3D Slicer: add $ROOT/slicer_module/UMind under Edit > Application Settings > Modules > Additional module
  paths, restart, open Ultrasound > UMind and connect to $CLIENT_URL
  The stock MONAILabel extension shows umind_segment (targets = the /info labels, --conf labels),
  umind_detect (ROIs) and umind_interactive (clicks, ROI); landmarks, measurements and diagnosis/report/
  questions need the UMind module. Details: README, "The stock MONAILabel extension".
MSG
exec monailabel start_server --app "$ROOT/monailabel_app" --studies "$STUDIES" --host "$HOST" --port "$PORT" \
  ${ARGS[@]+"${ARGS[@]}"}

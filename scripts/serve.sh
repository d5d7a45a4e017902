#!/usr/bin/env bash
# The README's main command: sets up .venv when missing (scripts/env.sh), writes synthetic sample studies on the
# first run, and starts the MONAI Label server with the UMind app on 127.0.0.1.
#   scripts/serve.sh                       # synthetic sample studies, port 8000
#   UMIND_STUDIES=/data/us PORT=8080 scripts/serve.sh --conf model /models/umind
# Extra arguments go to `monailabel start_server` (e.g. --conf retrain_every 5).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/env.sh"
# outside the source tree: the app keeps adapter versions under STUDIES/.umind and refuses the repository
STUDIES="${UMIND_STUDIES:-${XDG_DATA_HOME:-$HOME/.local/share}/umind/sample-studies}"
PORT="${PORT:-8000}"
cd "$ROOT"
if [ -z "${UMIND_STUDIES:-}" ]; then
  python -m monailabel_app.samples "$STUDIES"
fi
cat <<MSG
umind: serving $STUDIES at http://127.0.0.1:$PORT
  3D Slicer: add $ROOT/slicer_module/UMind under Edit > Application Settings > Modules > Additional module
  paths, restart, open Ultrasound > UMind and connect to http://127.0.0.1:$PORT
  (the stock MONAILabel extension works too: umind_segment, umind_interactive, umind_detect).
MSG
exec monailabel start_server --app "$ROOT/monailabel_app" --studies "$STUDIES" --host 127.0.0.1 --port "$PORT" "$@"

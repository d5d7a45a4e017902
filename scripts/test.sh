#!/usr/bin/env bash
# The README's test command: sets up .venv when missing (scripts/env.sh), then runs the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k grounding).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/env.sh"
cd "$ROOT"
exec python -m pytest tests -q -p no:cacheprovider --timeout=900 "$@"

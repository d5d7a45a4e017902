#!/usr/bin/env bash
# The README's main command. Sets up .venv when missing (scripts/env.sh), then runs the main job.
# Until the MONAI Label app lands this is a smoke run of the model: load, one forward on a synthetic image.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/env.sh"
cd "$ROOT"
exec umind smoke "$@"

#!/usr/bin/env bash
# Creates the project's virtual environment in .venv when it is missing or when pyproject.toml changed,
# and reuses it otherwise. Sourced by scripts/test.sh and scripts/serve.sh so both README commands set up
# a fresh machine by themselves.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${UMIND_VENV:-$ROOT/.venv}"
STAMP="$VENV/.umind-deps-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  echo "[umind] setting up $VENV (first run takes about 7 minutes)" >&2
  PY="${PYTHON:-python3.11}"
  command -v "$PY" >/dev/null 2>&1 || PY=python3
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
  # Install the torch pair first: it avoids a second resolution (monai and sam2 pull torchvision in).
  "$VENV/bin/python" -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
  rm -f "$VENV"/.umind-deps-*
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export VIRTUAL_ENV="$VENV"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

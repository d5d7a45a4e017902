#!/usr/bin/env bash
# The README's test command: sets up .venv when missing (scripts/env.sh), then runs the whole suite.
# Arguments go to pytest (e.g. scripts/test.sh tests/test_grounding.py). `--quick` first: the edit-test loop's
# subset, every test not marked slow, server or model (tests/conftest.py marks the model fixtures' users).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/env.sh"
cd "$ROOT"
quick=()
if [ "${1:-}" = --quick ]; then shift; quick=(-m "not slow and not server and not model"); fi
# the browser viewer, built once and reused (its tests skip with one line when it cannot be built; --quick uses
# whatever build is there)
[ ${#quick[@]} -gt 0 ] || bash scripts/web.sh || echo "umind: viewer not built; its tests skip (needs node and npm)" >&2
# with no arguments the whole suite; arguments that name tests or options replace the default path
[ $# -gt 0 ] || set -- tests
# UMIND_TEST_WORKERS processes (default 2; 0 = one process): each test file runs whole in one worker, so the
# servers and models a file shares are started once, as in one process. Each worker computes on one OpenMP thread
# (unless OMP_NUM_THREADS says otherwise): two workers of two threads each oversubscribed 2 cores. On a clean clone
# the whole suite took 9.9-10.3 min so (1,626-1,628 tests), 18.0 min before with two threads a worker and before the
# shared fixture and the reused kernel templates (test_fast_decode's tuned every-task test: 24 s against 197 s)
workers="${UMIND_TEST_WORKERS:-2}"
parallel=()
if [ "$workers" != 0 ]; then
  parallel=(-n "$workers" --dist loadfile)
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
fi
exec python -m pytest -q -p no:cacheprovider --timeout=900 "${parallel[@]}" "${quick[@]}" "$@"

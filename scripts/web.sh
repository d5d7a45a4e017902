#!/usr/bin/env bash
# Builds the browser viewer (web/ -> web/dist, served at /viewer/) from npm packages pinned in web/package-lock.json,
# once: the build is kept in a cache outside the checkout under a hash of the lock file and the sources, so a
# later call (another clone, the next CI run) copies it in milliseconds and starts neither npm nor node.
#   scripts/web.sh            # build or reuse; prints where the viewer is and how long it took
# Needs node >= 18 and npm (Debian: apt-get install nodejs npm). UMIND_WEB_CACHE overrides the cache folder,
# UMIND_WEB_OUT the folder the build is copied to (web/dist, which the server serves unless UMIND_VIEWER_DIR says).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WEB="$ROOT/web"
CACHE="${UMIND_WEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/umind-web}"
OUT="${UMIND_WEB_OUT:-$WEB/dist}"
start=$(date +%s.%N)
lock_key=$(cat "$WEB/package.json" "$WEB/package-lock.json" | sha256sum | cut -c1-16)
build_key=$( { echo "$lock_key"; cat "$WEB/build.mjs"; find "$WEB/src" -type f | LC_ALL=C sort | xargs cat; } \
            | sha256sum | cut -c1-16)
mkdir -p "$CACHE"
if [ ! -f "$CACHE/dist-$build_key/index.html" ]; then
  command -v node >/dev/null && command -v npm >/dev/null \
    || { echo "umind: the viewer needs node and npm to build (apt-get install nodejs npm)" >&2; exit 3; }
  exec 9>"$CACHE/.lock"
  flock 9
  if [ ! -f "$CACHE/dist-$build_key/index.html" ]; then
    modules="$CACHE/modules-$lock_key"
    if [ ! -d "$modules/node_modules" ]; then
      rm -rf "$modules.tmp" && mkdir -p "$modules.tmp"
      cp "$WEB/package.json" "$WEB/package-lock.json" "$WEB/.npmrc" "$modules.tmp/"
      (cd "$modules.tmp" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
      rm -rf "$modules" && mv "$modules.tmp" "$modules"
    fi
    work=$(mktemp -d "$CACHE/build.XXXXXX")
    cp -r "$WEB/src" "$WEB/build.mjs" "$WEB/package.json" "$work/"
    ln -s "$modules/node_modules" "$work/node_modules"
    (cd "$work" && node build.mjs dist >/dev/null)
    rm -rf "$CACHE/dist-$build_key" && mv "$work/dist" "$CACHE/dist-$build_key" && rm -rf "$work"
    # keep the three newest builds and module sets
    ls -dt "$CACHE"/dist-* 2>/dev/null | tail -n +4 | xargs -r rm -rf
    ls -dt "$CACHE"/modules-* 2>/dev/null | grep -v '\.tmp$' | tail -n +4 | xargs -r rm -rf
  fi
  flock -u 9
fi
rm -rf "$OUT.tmp" && cp -r "$CACHE/dist-$build_key" "$OUT.tmp"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
echo "umind: viewer ready in ${UMIND_WEB_OUT:-web/dist} ($(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $start}") s; served at /viewer/)"

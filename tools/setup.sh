#!/usr/bin/env bash
# Idempotent set-up from nothing: .venv with the pinned Python packages and kvedge (editable), the
# MicroPython wasm port from npm (exact version, package-lock.json), and Debian's qemu-system-arm for the
# emulated Arm boards and qemu-system-misc (qemu-system-xtensa) for the emulated Xtensa board (installed when
# missing and we are root; otherwise those runtimes are skipped, and tools/test says why). Re-runs only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
want=$(cat requirements.txt pyproject.toml tools/wasm/package-lock.json | sha256sum | cut -d' ' -f1)
stamp=.venv/.kvedge-setup
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -d tools/wasm/node_modules/@micropython ]; then
  echo "setup: installing Python packages and the wasm runtime" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
  (cd tools/wasm && npm ci --silent --no-audit --no-fund)
  echo "$want" > "$stamp"
fi
for q in "qemu-system-arm qemu-system-arm the emulated Arm boards: the m3, m0 and m7" \
         "qemu-system-xtensa qemu-system-misc the emulated Xtensa board: the xt"; do
  set -- $q
  exe=$1 pkg=$2
  shift 2
  what=$*
  if ! command -v "$exe" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "setup: installing $pkg ($what runtimes)" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null; } \
        || echo "setup: could not install $pkg: $what runtimes will be skipped" >&2
    else
      echo "setup: $exe is missing (as root: apt-get install $pkg): $what runtimes will be skipped" >&2
    fi
  fi
done

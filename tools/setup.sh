#!/usr/bin/env bash
# Idempotent set-up from nothing: .venv with the pinned Python packages and kvedge (editable), and the
# MicroPython wasm port from npm (exact version, package-lock.json). Re-runs only what changed.
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

#!/usr/bin/env bash
# Set up everything the project needs on a fresh Debian machine: system packages, then .venv.
# Idempotent: `make` calls it whenever requirements.txt is newer than the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
# System packages: libpython3.11 is linked by tritonserver's Python-backend stub.
APT_PACKAGES=(libpython3.11)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
command -v "$PYTHON" >/dev/null 2>&1 || missing+=(python3.11 python3.11-venv)
if ((${#missing[@]})); then
  echo "bootstrap: installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
echo "bootstrap: installing pinned requirements into .venv (first time: about a minute)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
# Guard: exactly the local CPU torch wheel; anything else would pull GBs of CUDA packages.
.venv/bin/python - <<'PY'
import torch, sys
if not torch.__version__.startswith("2.13.0"):
    sys.exit(f"bootstrap: torch {torch.__version__} installed; expected 2.13.0 (CPU)")
PY
touch .venv/.installed
echo "bootstrap: done"

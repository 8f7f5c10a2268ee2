#!/usr/bin/env bash
# Set up everything the project needs on a fresh Debian machine: system packages, then .venv.
# Idempotent: `make` calls it whenever requirements.txt is newer than the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

# The venv must be made from Debian's python3.11: tritonserver's Python-backend stub embeds
# Debian's libpython3.11 and loads the stdlib of the venv's base interpreter, so both must be
# the same build (with pyenv's 3.11.7 stdlib, `import ssl` fails inside the stub: seen).
PYTHON=/usr/bin/python3.11
# System packages: that Python, libpython3.11 (linked by the stub; loaded by the native backend for
# custom ops), g++ (builds the native backend, native/fastpath_ort), libhiredis-dev (the Redis
# client the C++ response cache, native/fastpath_cache, links statically), binutils (nm and
# addr2line name tritonserver's frames in a crash stack: triton_fastpath/serve/crash.py), libutf8proc-dev
# (Unicode data of the exact C++ WordPiece tokenizer, linked statically) and rapidjson-dev (the
# native JSON reader of both libraries, native/common/json.cc, and the tokenizer.json reader; header-only), redis-server (the L2 cache), prometheus (+ promtool; load-test
# reports and rule checks) and clang-14 with libclang-rt-14-dev (libFuzzer, for the fuzz of the
# response cache's Redis value decoder: triton_fastpath/native/cache_checks.py; without them it falls
# back to a slower mutation loop), libjemalloc2 (tritonserver's malloc, preloaded:
# triton_fastpath/serve/allocator.py). Tests and scripts start their own servers on free ports; nothing
# here starts a daemon.
APT_PACKAGES=(python3.11 python3.11-venv libpython3.11 g++ binutils libhiredis-dev libutf8proc-dev rapidjson-dev
  redis-server prometheus clang-14 libclang-rt-14-dev libjemalloc2)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -x .venv/bin/python ] && [ "$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')" != "/usr" ]; then
  echo "bootstrap: .venv was made from another Python ($(.venv/bin/python -c 'import sys; print(sys.base_prefix)')); recreating it"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
echo "bootstrap: installing pinned requirements into .venv (first time: about a minute)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
# The project itself, editable, without resolving anything again: puts the `fastpath` command in .venv/bin.
.venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
# Guard: exactly the local CPU torch wheel; anything else would pull GBs of CUDA packages.
.venv/bin/python - <<'PY'
import torch, sys
if not torch.__version__.startswith("2.13.0"):
    sys.exit(f"bootstrap: torch {torch.__version__} installed; expected 2.13.0 (CPU)")
PY
touch .venv/.installed
echo "bootstrap: done"

#!/usr/bin/env bash
# Wheels for the KV-tier step of bench/gpu_check.sh, for a GPU machine whose image has CUDA torch and
# Triton but not the rest of what tests/test_kv_device.py imports (transformers, cryptography,
# google-crc32c, redis) and no package index. Run here (the index is reachable); then carry
# bench/out/gpu_wheels to the GPU machine with the working tree (the device tool's `carry`), where
# gpu_check.sh installs them without the index. Versions follow requirements.lock.
#
#   bash bench/gpu_wheels.sh [PYTHON_VERSION]    # default 3.12, the GPU image's Python
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYV="${1:-3.12}"
DEST=bench/out/gpu_wheels
PIP=(.venv/bin/python -m pip)
[ -x .venv/bin/python ] || PIP=(python3 -m pip)
rm -rf "$DEST" && mkdir -p "$DEST"
"${PIP[@]}" download -q --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -c requirements.lock -d "$DEST" transformers cryptography google-crc32c redis pyyaml
echo "$(ls "$DEST" | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST (python $PYV)"

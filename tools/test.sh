#!/usr/bin/env bash
# Set up (idempotent, see tools/setup.sh) and run the whole test suite, as CI does.
#   bash tools/test.sh [extra pytest args]
# Two passes, so that every device test runs on both software drivers:
#   1. the whole suite on SwiftShader (the strict target) with the Khronos validation layer and
#      its synchronization validation on: any validation message or SYNC-HAZARD fails the test
#      that caused it (tests/conftest.py) — a CPU driver runs dispatches in order, a GPU does not;
#   2. the device tests again on lavapipe.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1
PY=.venv/bin/python
export PYTHONUNBUFFERED=1
$PY tools/compile_shaders.py >/dev/null || { $PY tools/compile_shaders.py; exit 1; }

echo "== pass 1/2: SwiftShader, validation layer and synchronization validation on"
VKQ_TEST_DEVICES=swiftshader VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation \
  VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT \
  $PY -m pytest -q -p no:cacheprovider "$@"
rc1=$?
echo "== pass 2/2: lavapipe, device tests"
VKQ_TEST_DEVICES=llvmpipe $PY -m pytest -q -p no:cacheprovider -m vulkan "$@"
rc2=$?
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]

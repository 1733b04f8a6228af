#!/usr/bin/env bash
# Set up (idempotent, see tools/setup.sh) and run the whole test suite, as CI does.
#   bash tools/test.sh [extra pytest args]
# Four passes, so that every device test runs on both software drivers and under the checks a
# CPU driver alone would hide:
#   1. the whole suite on SwiftShader (the strict target) with the Khronos validation layer and
#      its synchronization validation on: any validation message or SYNC-HAZARD fails the test
#      that caused it (tests/conftest.py) — a CPU driver runs dispatches in order, a GPU does not;
#   2. the device tests again on lavapipe, logging which test builds which shader variant;
#   3. the kernel tests that build a subgroup variant in pass 2 (tools/select_tests.py subgroups),
#      on lavapipe at the vector widths (of 128/256/512 bits: 4/8/16 lanes) that passes 1-2 did
#      not use (vkq takes 512 where the CPU has AVX-512, else 256: vkq/device.py): those of
#      tests/test_exact_float.py and tests/test_same_bits.py at both, so that the float kernels'
#      and whole float-heavy programs' equal bits are checked at every subgroup size; the other
#      kernel tests' at one of the two, which the commit picks (over commits, both);
#   4. GPU-assisted validation (out-of-bounds buffer accesses) on lavapipe, over the fewest tests
#      of pass 2 that build every shader variant (tools/select_tests.py cover; it also fails if a
#      declared variant is built by no test at all), in a time budget: $VKQ_GPUAV_MINUTES
#      (default 6), and no later than $VKQ_SUITE_MINUTES (default 75) from the start, for CI's
#      90. The whole cover takes ~65 CPU minutes (llvmpipe compiling instrumented shaders), so it
#      runs in priority order: the variants of the shaders changed last first, then a rotation
#      the commit picks; a test that would end past the budget is skipped, and `select_tests.py checked` says
#      how many variants this run saw.
# Each pass runs in a process per core, at most 4 (pytest-xdist): a test is mostly single-threaded
# Python, shader compiles and the validation layer, so one process kept one core of two busy.
# --dist loadscope keeps a module's tests in one process, so a module's fixtures (a quantized
# model, say) are built once.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1
PY=.venv/bin/python
export PYTHONUNBUFFERED=1
$PY tools/compile_shaders.py >/dev/null || { $PY tools/compile_shaders.py; exit 1; }
LAYER=VK_LAYER_KHRONOS_validation
JOBS=$(nproc); [ "$JOBS" -gt 4 ] && JOBS=4
XDIST=(); [ "$JOBS" -gt 1 ] && XDIST=(-n "$JOBS" --dist loadscope)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "== pass 1/4: SwiftShader, validation layer and synchronization validation on"
VKQ_TEST_DEVICES=swiftshader VK_INSTANCE_LAYERS=$LAYER \
  VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT \
  $PY -m pytest -q -p no:cacheprovider "${XDIST[@]}" "$@"
rc1=$?

echo "== pass 2/4: lavapipe, device tests"
VKQ_TEST_DEVICES=llvmpipe VKQ_DISPATCH_LOG=$WORK/dispatch.log $PY -m pytest -q -p no:cacheprovider -m vulkan "${XDIST[@]}" "$@"
rc2=$?

USED_WIDTH=$($PY -c 'import os, vkq.device; print(os.environ.get("LP_NATIVE_VECTOR_WIDTH", "256"))')
OTHER_WIDTHS=(); for width in 128 256 512; do [ "$width" != "$USED_WIDTH" ] && OTHER_WIDTHS+=("$width"); done
# the kernel tests at one of the two, the commit's pick (another commit, the other width): the
# exact-float and same-bits tests, the equal-bits claim at every subgroup size, at both
KERNEL_WIDTH=${OTHER_WIDTHS[$(( 0x$(git rev-parse --short=4 HEAD 2>/dev/null || echo 0) % 2 ))]}
echo "== pass 3/4: lavapipe at the vector widths other than $USED_WIDTH bits: the equal-bits tests' subgroup kernels at ${OTHER_WIDTHS[*]}, the other kernel tests' at $KERNEL_WIDTH"
$PY tools/select_tests.py subgroups "$WORK/dispatch.log" tests/test_exact_float.py tests/test_same_bits.py > "$WORK/subgroup_exact.txt"
rc3=$?
$PY tools/select_tests.py subgroups "$WORK/dispatch.log" tests/test_conv.py tests/test_linear.py tests/test_float_ops.py \
  tests/test_pool.py tests/test_eltwise.py > "$WORK/subgroup_kernels.txt" || rc3=1
for width in "${OTHER_WIDTHS[@]}"; do
  lists=("@$WORK/subgroup_exact.txt"); [ "$width" = "$KERNEL_WIDTH" ] && lists+=("@$WORK/subgroup_kernels.txt")
  LP_NATIVE_VECTOR_WIDTH=$width VKQ_TEST_DEVICES=llvmpipe \
    $PY -m pytest -q -p no:cacheprovider -m vulkan "${XDIST[@]}" tests/test_devices.py "${lists[@]}" "$@" || rc3=1
done
echo "== pass 4/4: lavapipe, GPU-assisted validation over every shader variant, in priority order, time-budgeted"
$PY tools/select_tests.py cover "$WORK/dispatch.log" "$WORK/gpuav_reckoned.json" > "$WORK/gpuav_tests.txt"
rc4=$?
if [ -s "$WORK/gpuav_tests.txt" ]; then   # (an empty list would make pytest run everything)
  # Its time is compiling the instrumented shaders (llvmpipe's LLVM splitting a barrier kernel
  # into coroutines: minutes for some variants, one thread a process; Mesa's shader cache misses,
  # the instrumentation numbering shaders in creation order). The tests share no fixtures worth
  # keeping together, so they are dealt one at a time, in the list's priority order, to whichever
  # process is free.
  gpuav=(); [ "$JOBS" -gt 1 ] && gpuav=(-n "$JOBS" --dist load --maxschedchunk 1)
  budget=$(( ${VKQ_GPUAV_MINUTES:-6} * 60 )); left=$(( ${VKQ_SUITE_MINUTES:-75} * 60 - SECONDS ))
  [ "$left" -lt "$budget" ] && budget=$left
  # (a test under way at the deadline runs on: 3 minutes past a 10-minute budget, measured)
  if [ "$budget" -lt 60 ]; then
    echo "GPU-assisted validation: no time left in the suite's budget; skipped this run"
    budget=0
  fi
fi
if [ -s "$WORK/gpuav_tests.txt" ] && [ "$budget" -gt 0 ]; then
  echo "GPU-assisted validation: $(( budget / 60 )) minutes, tests in priority order (later ones skipped)"
  VKQ_TEST_DEADLINE=$(( $(date +%s) + budget )) VKQ_TEST_RECKONED=$WORK/gpuav_reckoned.json \
    VKQ_DISPATCH_LOG=$WORK/gpuav.log \
    VKQ_TEST_DEVICES=llvmpipe VK_INSTANCE_LAYERS=$LAYER \
    VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT \
    $PY -m pytest -q -p no:cacheprovider "${gpuav[@]}" "@$WORK/gpuav_tests.txt" || rc4=1
  $PY tools/select_tests.py checked "$WORK/dispatch.log" "$WORK/gpuav.log"
fi

[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ]

#!/usr/bin/env bash
# Run vkq from the GPU run kit on a machine with a Vulkan GPU driver and no package registry
# (tools/gpu/README.md). One command, from the repo root, well inside 10 minutes:
#
#   bash .gpu-kit/run.sh                 # on the GPU machine (root, Python 3.12, torch + CUDA)
#   bash .gpu-kit/run.sh --local         # here: this venv's kp and numpy, lavapipe
#   bash .gpu-kit/run.sh --python PY --device llvmpipe   # the remote path rehearsed here
#
# Options: --device D (default nvidia; --local: llvmpipe), --repeats N (default 50),
#   --tests all|no-torch|none (default all; --local: no-torch), --budget SECONDS (default 540:
#   optional steps are skipped, and long ones cut, so the run ends by then), --quick (repeats 5,
#   no torch steps, no validation pass; for CI), --python PY (default python3; --local: the
#   interpreter that imports kp), --prefix-only (never unpack into /, even as root: for a
#   rehearsal on a development machine; a missing loader library goes on LD_LIBRARY_PATH),
#   --gpu-av (after the synchronization pass, the device tests again under GPU-assisted
#   validation, which reports out-of-bounds buffer accesses: the kernel tests where torch
#   imports, else the no-torch ones; slow, so it takes the time of the steps after it).
# Steps: unpack the Debian packages (the Vulkan loader into / only where it is missing, as root;
# the rest into a prefix), install numpy<2 and vkq into target folders, build kp with CMake
# (the prebuilt module is the fallback), then `vkq devices`, the programs through `vkq run`
# bit for bit against their expected outputs, the no-torch device tests, a benchmark of the
# saved programs with the integer dot product on and off, the same tests and programs under
# the Khronos validation layer with synchronization validation, torch CUDA fp32/fp16 latency
# of the same models, the tests that use torch as their reference, and `vkq bench kernels`.
# The report goes to stdout and, with everything else, to $OUT (or .gpu-kit/out):
#   report.txt report.json devices.json run.log bench_kernels.json
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -f "$HERE/MANIFEST.json" ]; then KIT=$HERE; else KIT=$(cd "$HERE/../.." && pwd)/.gpu-kit; fi
LOCAL=0 PY= DEV= REPEATS=50 TESTS= BUDGET=540 QUICK=0 PREFIX_ONLY=0 GPU_AV=0
while (($#)); do
  case $1 in
    --local) LOCAL=1; shift ;;
    --python) PY=$2; shift 2 ;;
    --device) DEV=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --tests) TESTS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --prefix-only) PREFIX_ONLY=1; shift ;;
    --gpu-av) GPU_AV=1; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -f "$KIT/MANIFEST.json" ] || { echo "run.sh: no kit at $KIT (run tools/gpu/pack.sh first, and carry .gpu-kit)" >&2; exit 2; }
OUTDIR=${OUT:-$KIT/out}
WORK=${VKQ_KIT_WORK:-/tmp/vkq-gpu-kit}
RES=$WORK/res
PREFIX=$WORK/prefix
if ((LOCAL)); then
  MODE=local; DEV=${DEV:-llvmpipe}; TESTS=${TESTS:-no-torch}
  if [ -z "$PY" ]; then     # the interpreter that has kp: $VKQ_PYTHON, the repo's venv, python3
    for c in "${VKQ_PYTHON:-}" "$KIT/../.venv/bin/python" python3; do
      [ -n "$c" ] && "$c" -c "import kp" 2>/dev/null && { PY=$c; break; }
    done
  fi
else
  MODE=remote; DEV=${DEV:-nvidia}; TESTS=${TESTS:-all}; PY=${PY:-python3}
fi
((QUICK)) && REPEATS=5
[ -n "$PY" ] && PY=$(command -v "$PY") || { echo "run.sh: no Python interpreter (--python)" >&2; exit 2; }
# absolute, but not through symbolic links (a venv's python is a link to the base interpreter)
case $PY in /*) ;; *) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 VKQ_CACHE_DIR=$WORK/spirv
unset VK_INSTANCE_LAYERS VK_LAYER_ENABLES CI

step_t0=0
begin() { step_t0=$SECONDS; printf '\n\033[1m== %s\033[0m (%d s in)\n' "$1" "$SECONDS"; }
# end NAME STATUS DETAIL: one line of $RES/steps.tsv (the report's step table)
end() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$((SECONDS - step_t0))" "${3:-}" >> "$RES/steps.tsv"; echo "-- $1: $2 ${3:-}"; }
left() { echo $((BUDGET - SECONDS)); }
# room NEED: is there time left for a step that needs NEED seconds (plus 30 for the report)?
room() { (($(left) > $1 + 30)); }
cap() { local t=$(($(left) - 30)); ((t > $1)) && t=$1; echo $((t > 10 ? t : 10)); }
pyrun() { PYTHONPATH=$SITE "$PY" "$@"; }
deb_x() {   # deb_x DEB DIR: unpack without installing (dpkg -x, else ar + tar)
  dpkg -x "$1" "$2" 2>/dev/null && return 0
  local t; t=$(mktemp -d); (cd "$t" && ar x "$1" && tar xf data.tar.* -C "$2"); local rc=$?; rm -rf "$t"; return $rc
}
# finish NAME RC [DETAIL]: end a step by its exit status. Cut at its time limit (124, 137) is not
# a failure: the tests report what ran (junit XML) and the bench what it measured, and the
# report judges those.
finish() {
  case $2 in 0) end "$1" ok "${3:-}" ;; 124|137) end "$1" cut "at its time limit (rc $2)" ;; *) end "$1" FAILED "rc $2" ;; esac
}
# has_lib SONAME: in the dynamic linker's cache? (no grep -q on the pipe: with pipefail, ldconfig
# killed by SIGPIPE after an early match would read as "missing")
has_lib() { local cache; cache=$(ldconfig -p 2>/dev/null); grep -q "^[[:space:]]*$1 " <<<"$cache"; }

main() {
  rm -rf "$WORK"; mkdir -p "$WORK" "$RES" "$PREFIX" "$WORK/lib" "$WORK/site-np" "$WORK/site-vkq" "$OUTDIR" "$VKQ_CACHE_DIR"
  # python -c / -m put the working folder first on sys.path: not the repo root, whose vkq/
  # would shadow the kit's wheel
  cd "$WORK" || return 1
  echo "vkq GPU kit: $MODE mode, device '$DEV', kit $KIT, work $WORK, results $OUTDIR, budget ${BUDGET} s"

  # --- the machine --------------------------------------------------------------------------
  begin "machine"
  nvidia-smi -L 2>/dev/null
  "$PY" - "$RES/env.json" "$MODE" "$QUICK" <<'EOF'
import json, platform, socket, subprocess, sys
env = {"mode": sys.argv[2], "host": socket.gethostname(), "python": platform.python_version(),
       "executable": sys.executable, "glibc": " ".join(platform.libc_ver()), "kernel": platform.release()}
try:
    env["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
except Exception:
    env["gpu"] = ""
try:
    if sys.argv[3] == "1":
        raise ImportError("not checked (--quick)")
    import torch
    env["torch"] = torch.__version__
except Exception as e:
    env["torch"] = f"not importable ({type(e).__name__}: {e})"
json.dump(env, open(sys.argv[1], "w"), indent=1)
print(json.dumps(env))
EOF
  end machine ok "$("$PY" -c 'import platform; print(platform.python_version())')"

  # --- Debian packages ------------------------------------------------------------------------
  begin "loader and tools"
  local note=""
  if ((!LOCAL)) && [ -d "$KIT/debs/loader" ]; then
    # the Vulkan loader and GLVND (NVIDIA's ICD library links libGLdispatch): into / as root,
    # only where the machine lacks the library (the device README's recipe); else beside us
    declare -A SONAME=([libvulkan1]=libvulkan.so.1 [libglvnd0]=libGLdispatch.so.0 [libegl1]=libEGL.so.1
                       [libgl1]=libGL.so.1 [libglx0]=libGLX.so.0 [libopengl0]=libOpenGL.so.0 [libgles2]=libGLESv2.so.2)
    for deb in "$KIT"/debs/loader/*.deb; do
      local pkg; pkg=$(basename "$deb"); pkg=${pkg%%_*}
      has_lib "${SONAME[$pkg]:-none}" && continue
      if [ "$(id -u)" = 0 ] && ((!PREFIX_ONLY)); then deb_x "$deb" / && note+="$pkg->/ "
      else mkdir -p "$WORK/loader" && deb_x "$deb" "$WORK/loader" && note+="$pkg->LD_LIBRARY_PATH "; fi
    done
    [ "$(id -u)" = 0 ] && ((!PREFIX_ONLY)) && ldconfig
    [ -d "$WORK/loader" ] && export LD_LIBRARY_PATH=$WORK/loader/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  # kp links against the loader: libvulkan1 goes into the build prefix too (not on any path)
  for deb in "$KIT"/debs/loader/libvulkan1_*.deb; do [ -f "$deb" ] && deb_x "$deb" "$PREFIX"; done
  for deb in "$KIT"/debs/build/*.deb "$KIT"/debs/tools/*.deb; do [ -f "$deb" ] && deb_x "$deb" "$PREFIX"; done
  # kp links libfmt.so.9: only that library goes on the search path (the machine keeps its loader)
  ln -sf "$PREFIX"/usr/lib/x86_64-linux-gnu/libfmt.so.9* "$WORK/lib/" 2>/dev/null
  export LD_LIBRARY_PATH=$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # the carried shader compiler first (the SPIR-V cache was compiled with it)
  [ -x "$PREFIX/usr/bin/glslangValidator" ] && export PATH=$PREFIX/usr/bin:$PATH
  PATH=$PATH:$(dirname "$PY")     # cmake, ninja, pytest installed beside the interpreter
  cp -r "$KIT/spirv/." "$VKQ_CACHE_DIR/"
  # the validation layer, its manifest pointing at the unpacked library
  VALIDATION_LAYERS=
  local vj=$PREFIX/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json
  if [ -f "$vj" ]; then
    mkdir -p "$WORK/layers"
    sed "s|\"library_path\": \"libVkLayer_khronos_validation.so\"|\"library_path\": \"$PREFIX/usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so\"|" \
      "$vj" > "$WORK/layers/VkLayer_khronos_validation.json"
    VALIDATION_LAYERS=$WORK/layers
  fi
  local gv; gv=$(glslangValidator --version 2>/dev/null | head -1)
  end "loader and tools" ok "${note:-loader from the machine}; libvulkan $(has_lib libvulkan.so.1 && echo in ldconfig || echo 'NOT in ldconfig'); ${gv:-no glslangValidator}; validation layer: $([ -n "$VALIDATION_LAYERS" ] && echo carried || echo none)"

  # --- Python packages: vkq (and numpy<2, kp) into target folders, first on the path -------
  begin "python packages"
  local pipi=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check --target)
  whl_in() { "${pipi[@]}" "$2" "$1" >/dev/null 2>&1 || "$PY" -m zipfile -e "$1" "$2"; }
  whl_in "$(ls "$KIT"/wheels/vkq-*.whl | head -1)" "$WORK/site-vkq" || { end "python packages" FAILED "vkq wheel"; return 1; }
  if ((LOCAL)); then
    SITE=$WORK/site-vkq
  else
    whl_in "$(ls "$KIT"/wheels/numpy-1.*.whl | head -1)" "$WORK/site-np" || { end "python packages" FAILED "numpy wheel"; return 1; }
    mkdir -p "$WORK/pybind11" && "$PY" -m zipfile -e "$(ls "$KIT"/wheels/pybind11-*.whl | head -1)" "$WORK/pybind11"
    SITE=$WORK/site-vkq:$WORK/site-np
  fi
  local which; which=$(pyrun -c 'import numpy, vkq; print("numpy", numpy.__version__, "from", numpy.__file__, "| vkq from", vkq.__file__)')
  case $which in
    *"vkq from $WORK/site-vkq/"*) end "python packages" ok "$which" ;;
    *) end "python packages" FAILED "vkq is not the kit's wheel: $which"; return 1 ;;
  esac

  # --- kp: built here with CMake, else the module prebuilt where the kit was packed -----------
  begin "kp"
  if ((LOCAL)); then
    end kp ok "the interpreter's own: $(pyrun -c 'import kp; print(kp.__file__)' 2>&1 | tail -1)"
  else
    local t0=$SECONDS how status=ok
    if bash "$KIT/build_kp.sh" --python "$PY" --src "$KIT/src/kp-0.9.0" --prefix "$PREFIX" --out "$WORK/site-np" \
        --pybind11 "$WORK/pybind11" --build "$WORK/kp-build" --jobs "$(nproc)"; then
      how="built here in $((SECONDS - t0)) s"
    else
      local tag; tag=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
      if [ -f "$KIT/kp-prebuilt/kp$tag" ]; then
        cp "$KIT/kp-prebuilt/kp$tag" "$WORK/site-np/"; status=fallback
        how="the build here failed ($((SECONDS - t0)) s, see above): the kp$tag prebuilt where the kit was packed"
      else
        how="BUILD FAILED, no prebuilt kp$tag"
      fi
    fi
    if pyrun -c "import numpy, kp; assert numpy.__version__ < '2', numpy.__version__"; then
      end kp $status "$how; $(pyrun -c 'import kp; print(kp.__file__)')"
    else
      end kp FAILED "$how"; return 1
    fi
  fi

  # --- devices: NVIDIA's ICD by its path where the loader finds no driver ---------------------
  begin "devices"
  local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  if ! pyrun -m vkq devices --json > "$RES/devices.json" 2>"$RES/devices.err" \
      || ! pyrun -c "import json,sys; sys.exit(not json.load(open('$RES/devices.json'))['devices'])"; then
    if [ -f "$icd" ] && [ -z "${VK_DRIVER_FILES:-}" ]; then
      echo "no Vulkan device found: VK_DRIVER_FILES=$icd"; cat "$RES/devices.err"
      export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
      pyrun -m vkq devices --json > "$RES/devices.json" 2>"$RES/devices.err"
    fi
  fi
  pyrun -m vkq devices || { cat "$RES/devices.err"; end devices FAILED "no Vulkan device"; return 1; }
  cp "$RES/devices.json" "$OUTDIR/devices.json"
  if ! pyrun -c "import vkq; vkq.select_device('$DEV')" 2>/dev/null; then
    local fallback; fallback=$(pyrun -c "import vkq; print(vkq.select_device().index)")
    echo "no device matches '$DEV': the default device [$fallback] instead"; DEV=$fallback
  fi
  end devices ok "${VK_DRIVER_FILES:+VK_DRIVER_FILES=$VK_DRIVER_FILES; }running on $(pyrun -c "import vkq; print(vkq.select_device('$DEV').name)")"

  # --- the programs through `vkq run`, bit for bit -------------------------------------------
  begin "programs"
  pyrun "$KIT/kit.py" check "$KIT" "$RES" --device "$DEV" && end programs ok "equal bit for bit" \
    || end programs FAILED "see above"
  local before; before=$(ls "$VKQ_CACHE_DIR" | wc -l)

  # --- device tests that need no torch ------------------------------------------------------
  # run_tests TIER TAG SECONDS [env...]; at the time limit pytest gets SIGINT, so that it still
  # reports what ran (junit XML) before it stops
  run_tests() {
    local tier=$1 tag=$2 secs=$3; shift 3
    local files=() f
    for f in $(pyrun "$KIT/kit.py" tests "$tier"); do [ -f "$KIT/tests/$f" ] && files+=("$f"); done
    local extra=()
    ((QUICK)) && extra=(-x -k "not sync_hazard")
    (cd "$KIT/tests" && env "$@" VKQ_TEST_DEVICES="$DEV" PYTHONPATH="$SITE" timeout -s INT -k 30 "$(cap "$secs")" \
      "$PY" -m pytest -q -p no:cacheprovider -rfEs --junitxml="$RES/tests-$tag.xml" "${extra[@]}" "${files[@]}")
  }
  if [ "$TESTS" != none ]; then
    begin "tests: no torch"
    run_tests no-torch no-torch 240; finish "tests: no torch" $?
  fi

  # --- benchmark of the saved programs, integer dot product on and off ----------------------
  begin "bench"
  if room 60; then
    timeout "$(cap 240)" env PYTHONPATH="$SITE" "$PY" "$KIT/kit.py" bench "$KIT" "$RES" --device "$DEV" --repeats "$REPEATS"
    finish bench $? "$REPEATS calls a path"
  else end bench skipped "no time left"; fi
  local compiled=$(( $(ls "$VKQ_CACHE_DIR" | wc -l) - before ))
  echo "SPIR-V compiled on this machine beyond the carried cache: $compiled (the programs' first run above: $(( before - $(ls "$KIT/spirv" | wc -l) )))"
  printf 'spirv cache\tok\t0\t%s carried, %s compiled here for the programs, %s for tests and bench\n' \
    "$(ls "$KIT/spirv" | wc -l)" "$(( before - $(ls "$KIT/spirv" | wc -l) ))" "$compiled" >> "$RES/steps.tsv"

  # --- the Khronos validation layer with synchronization validation -------------------------
  begin "validation"
  local venv=(VK_LAYER_PATH="$VALIDATION_LAYERS" VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
              VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT)
  if ((QUICK)); then end validation skipped "--quick"
  elif [ -z "$VALIDATION_LAYERS" ]; then end validation skipped "no validation layer carried"
  elif ! room 120; then end validation skipped "no time left"
  # first the proof that the layer is on and catches a hazard here: else a clean run says nothing
  elif ! env "${venv[@]}" PYTHONPATH="$SITE" timeout 120 "$PY" "$KIT/kit.py" layer-proof "$KIT" "$RES" --device "$DEV"; then
    end validation skipped "the carried layer did not catch the planted hazard here (see above)"
  else
    env "${venv[@]}" PYTHONPATH="$SITE" timeout "$(cap 240)" "$PY" "$KIT/kit.py" check "$KIT" "$RES" --device "$DEV" \
      --tag check-validation; local rc1=$? rc2=0
    if [ "$TESTS" != none ] && room 60; then run_tests no-torch no-torch-validation 300 "${venv[@]}"; rc2=$?; fi
    ((rc1 == 0 && rc2 == 0)) && end validation ok "the planted hazard caught; programs and no-torch tests clean" \
      || end validation FAILED "programs rc $rc1, tests rc $rc2"
  fi

  # torch beside numpy<2 (kp's numpy): the kernel bench's CPU peers and the reference tests
  local torch_np1=0
  ((QUICK)) || ! pyrun -c "import torch" 2>/dev/null || torch_np1=1

  # --- optional: GPU-assisted validation, out-of-bounds accesses ------------------------------
  if ((GPU_AV)); then
    begin "gpu-assisted validation"
    local gav=(VK_LAYER_PATH="$VALIDATION_LAYERS" VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
               VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT)
    local tier=no-torch; ((torch_np1)) && [ "$TESTS" = all ] && tier=torch-reference
    if [ -z "$VALIDATION_LAYERS" ]; then end "gpu-assisted validation" skipped "no validation layer"
    elif ! room 120; then end "gpu-assisted validation" skipped "no time left"
    elif ! env "${gav[@]}" PYTHONPATH="$SITE" timeout 120 "$PY" "$KIT/kit.py" layer-proof "$KIT" "$RES" --device "$DEV" --kind oob; then
      end "gpu-assisted validation" skipped "the layer did not catch the planted out-of-bounds read here (see above)"
    else
      run_tests "$tier" "$tier-gpu-av" 300 "${gav[@]}"; finish "gpu-assisted validation" $? "the planted read caught; $tier tests clean"
    fi
  fi

  # --- torch: CUDA latency of the same models (the machine's numpy), tests with a torch reference
  begin "torch CUDA"
  if ((QUICK)); then end "torch CUDA" skipped "--quick"
  elif room 60; then
    # the machine's own numpy under torch here: vkq alone on the path
    PYTHONPATH=$WORK/site-vkq timeout "$(cap 150)" "$PY" "$KIT/kit.py" torch-bench "$RES" --repeats "$REPEATS"
    local trc=$?
    case $trc in 0) end "torch CUDA" ok ;; 3) end "torch CUDA" skipped "no torch with CUDA here" ;;
                 *) finish "torch CUDA" $trc ;; esac
  else end "torch CUDA" skipped "no time left"; fi
  begin "vkq bench kernels"
  if ((QUICK)); then end "vkq bench kernels" skipped "--quick"
  elif ((!torch_np1)); then end "vkq bench kernels" skipped "torch does not import"
  elif ! room 90; then end "vkq bench kernels" skipped "no time left"
  else
    # the options this vkq's bench has (its command line is still growing)
    local bopts=(--device "$DEV") bhelp; bhelp=$(pyrun -m vkq bench --help 2>&1)
    [[ $bhelp == *--no-progress* ]] && bopts+=(--no-progress)
    [[ $bhelp == *--json* ]] && bopts+=(--json "$OUTDIR/bench_kernels.json")
    PYTHONPATH=$SITE timeout "$(cap 200)" "$PY" -m vkq bench kernels "${bopts[@]}"
    finish "vkq bench kernels" $?
    [ ! -f "$OUTDIR/bench_kernels.json" ] || cp "$OUTDIR/bench_kernels.json" "$RES/"
  fi
  if [ "$TESTS" = all ] && ((!QUICK)); then
    begin "tests: torch reference"
    if ((!torch_np1)); then end "tests: torch reference" skipped "torch does not import beside numpy<2"
    elif ! room 90; then end "tests: torch reference" skipped "no time left"
    else run_tests torch-reference torch-reference 240; finish "tests: torch reference" $?; fi
  fi
  return 0
}

mkdir -p "$OUTDIR"
main 2>&1 | tee "$OUTDIR/run.log"
rc=${PIPESTATUS[0]}
printf '\n'
PYTHONPATH=$WORK/site-vkq${WORK:+:$WORK/site-np} "$PY" "$KIT/kit.py" report "$KIT" "$RES" "$OUTDIR" | tee -a "$OUTDIR/run.log"
rc_report=${PIPESTATUS[0]}
echo "total $SECONDS s; files in $OUTDIR: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
((rc == 0 && rc_report == 0))

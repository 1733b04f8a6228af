#!/usr/bin/env bash
# Pack the GPU run kit: everything vkq needs on a Linux x86-64 machine with a Vulkan GPU driver,
# Python 3.12 and no package registry (the lent NVIDIA machine: tools/gpu/README.md).
#
#   bash tools/gpu/pack.sh [--out DIR] [--quick]
#
# Run it here, in the checkout the device tool sends (the kit goes to .gpu-kit/, git-ignored;
# name it in the run's `carry`). Needs what tools/setup.sh installs (torch, vkq's test extras,
# apt-get, pip). --quick: no downloads and no heavy builds (scripts, tests, the vkq wheel, a
# SPIR-V cache compiled with this machine's glslang, the small digits program): what CI checks,
# and what run.sh --local runs; a quick kit cannot run on the GPU machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KIT=$ROOT/.gpu-kit
QUICK=0
while (($#)); do
  case $1 in
    --out) KIT=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "pack.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$KIT"
KIT=$(cd "$KIT" && pwd)
# the interpreter that compiles the programs: $VKQ_PYTHON, else the repo's venv, else python3;
# this checkout's vkq comes first on its path, so programs, wheel and tests agree
PY=${VKQ_PYTHON:-}
[ -n "$PY" ] || { [ -x "$ROOT/.venv/bin/python" ] && PY=$ROOT/.venv/bin/python; } || PY=python3
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
PY_TARGET=3.12            # the GPU machine's CPython
KP_VERSION=0.9.0
PYBIND11_VERSION=2.13.6   # knows Python 3.12 and numpy 1 and 2; the machine's own is the fallback
step() { printf '\033[1m[pack]\033[0m %s\n' "$*"; }
pip_q() { "$PY" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "^WARNING: Location '" >&2); }
T0=$SECONDS

# Debian 12 packages, by role. Each is unpacked with dpkg -x (run.sh), never installed.
#   loader: the Vulkan loader and GLVND (NVIDIA's ICD library needs libGLdispatch), the set the
#           device README brings; run.sh unpacks one into / only where its library is missing
#   build:  headers and libraries kp builds against
#   tools:  glslangValidator (links only libc/libstdc++) and the Khronos validation layer
LOADER_DEBS=(libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libopengl0 libgles2)
BUILD_DEBS=(libvulkan-dev libfmt-dev libfmt9)
TOOL_DEBS=(glslang-tools vulkan-validationlayers)

fetch_debs() {   # fetch_debs DIR PKG...: apt-get download, once (kept while the version matches)
  local dir=$1; shift
  mkdir -p "$dir"
  local need=()
  for p in "$@"; do ls "$dir/${p}"_*.deb >/dev/null 2>&1 || need+=("$p"); done
  ((${#need[@]})) || return 0
  # apt's sandbox user cannot write into root-owned folders: download in a temporary one
  local tmp; tmp=$(mktemp -d); chmod 777 "$tmp"
  if ! (cd "$tmp" && apt-get download -q "${need[@]}" >/dev/null 2>&1); then
    # no package lists yet: the device README's recipe (amd64 lists in a private folder)
    local o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/vkq-apt-lists)
    mkdir -p /tmp/vkq-apt-lists/partial
    apt-get "${o[@]}" update -qq >/dev/null
    (cd "$tmp" && apt-get "${o[@]}" download -q "${need[@]}" >/dev/null)
  fi
  mv "$tmp"/*.deb "$dir"/
  rm -rf "$tmp"
}

rm -rf "$KIT"/tests "$KIT"/programs "$KIT"/spirv "$KIT"/wheels/vkq-*.whl "$KIT"/MANIFEST.json
mkdir -p "$KIT"/{wheels,src,tests,programs,spirv}

# --- 1. scripts --------------------------------------------------------------------------
cp "$ROOT"/tools/gpu/{run.sh,build_kp.sh,kit.py,README.md} "$KIT"/

# --- 2. Debian packages, kp's source (patched here: the machine may have no `patch`) --------
if ((!QUICK)); then
  step "Debian 12 packages (apt-get download)"
  fetch_debs "$KIT/debs/loader" "${LOADER_DEBS[@]}"
  fetch_debs "$KIT/debs/build" "${BUILD_DEBS[@]}"
  fetch_debs "$KIT/debs/tools" "${TOOL_DEBS[@]}"
  step "kp $KP_VERSION sdist + tools/kp-0.9.0.patch"
  [ -f "$KIT/src/kp-$KP_VERSION.tar.gz" ] || pip_q download --no-deps --no-binary :all: -d "$KIT/src" "kp==$KP_VERSION"
  cp "$ROOT/tools/kp-0.9.0.patch" "$KIT/src/"
  rm -rf "$KIT/src/kp-$KP_VERSION" && tar xzf "$KIT/src/kp-$KP_VERSION.tar.gz" -C "$KIT/src"
  patch -s -d "$KIT/src/kp-$KP_VERSION" -p1 < "$ROOT/tools/kp-0.9.0.patch"
  rm -rf "$KIT/src/kp-$KP_VERSION"/{kp.egg-info,docs,test,examples} "$KIT/src/kp-$KP_VERSION/python/test"
fi

# --- 3. wheels: numpy<2 and pybind11 for CPython 3.12, vkq from this checkout -------------
step "wheels"
if ((!QUICK)); then
  ls "$KIT"/wheels/numpy-1.*-cp312-*.whl >/dev/null 2>&1 || pip_q download --no-deps --only-binary=:all: \
    --python-version $PY_TARGET --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$KIT/wheels" 'numpy<2'
  ls "$KIT"/wheels/pybind11-$PYBIND11_VERSION-*.whl >/dev/null 2>&1 \
    || pip_q download --no-deps --only-binary=:all: -d "$KIT/wheels" "pybind11==$PYBIND11_VERSION"
fi
# pure Python: shaders ship inside it (vkq.shaders); --no-deps: numpy and kp come separately.
# Built from a copy, so that setuptools' build/ and egg-info stay out of the checkout.
WB=$(mktemp -d); cp -r "$ROOT"/{pyproject.toml,README.md,vkq,shaders} "$WB"/
find "$WB" -name __pycache__ -prune -exec rm -rf {} +
pip_q wheel --no-deps --no-build-isolation -w "$KIT/wheels" "$WB"
rm -rf "$WB"

# --- 4. the shader compiler's SPIR-V cache of every declared variant ----------------------
# Compiled with the carried glslangValidator (the cache key holds the compiler's version, so
# the same binary there finds every entry); --quick uses this machine's.
GLSLANG_BIN=
if ((!QUICK)); then
  GL=$(mktemp -d); dpkg -x "$KIT"/debs/tools/glslang-tools_*.deb "$GL"; GLSLANG_BIN=$GL/usr/bin
else   # seeded from this machine's cache (same compiler): seconds instead of a minute in CI
  cp "${VKQ_CACHE_DIR:-$HOME/.cache/vkq/spirv}"/*.spv "$KIT/spirv/" 2>/dev/null || true
fi
step "SPIR-V cache ($( ${GLSLANG_BIN:+$GLSLANG_BIN/}glslangValidator --version | head -1))"
PATH=${GLSLANG_BIN:+$GLSLANG_BIN:}$PATH VKQ_CACHE_DIR=$KIT/spirv "$PY" -c "
from vkq import shaders
built = shaders.compile_all(validate=False)
keep = {shaders.cache_path(s, d) for s, d in built}
stale = [p for p in shaders.cache_dir().glob('*.spv') if p not in keep]   # a seed's old entries
for p in stale: p.unlink()
print(f'  {len(built)} variants of {len(shaders.list_shaders())} shaders ({len(stale)} stale entries dropped)')"
GLSLANG_VERSION=$(${GLSLANG_BIN:+$GLSLANG_BIN/}glslangValidator --version | head -1)
[ -z "$GLSLANG_BIN" ] || rm -rf "$GL"

# --- 5. the device tests (one list: kit.py) ----------------------------------------------
step "device tests"
cp "$ROOT"/tests/conftest.py "$ROOT"/tests/oputil.py "$KIT/tests/"
for tier in no-torch torch-reference; do
  for f in $("$PY" "$ROOT/tools/gpu/kit.py" tests $tier); do cp "$ROOT/tests/$f" "$KIT/tests/"; done
done
cat > "$KIT/tests/pytest.ini" <<'EOF'
[pytest]
markers =
    vulkan: needs a Vulkan device (run on every test device)
    slow: real models
EOF

# --- 6. programs compiled here, with inputs and the numpy reference's outputs --------------
step "programs (PT2E int8, compiled here)"
QARG=()
if ((QUICK)); then QARG=(--quick); fi
"$PY" "$ROOT/tools/gpu/kit.py" programs "$KIT/programs" "${QARG[@]}"

# --- 7. a kp module prebuilt here for CPython 3.12: run.sh falls back to it if the build there
# fails (it needs the machine's Python headers, a C++ compiler and CMake)
if ((!QUICK)); then
  PY312=${VKQ_PY312:-}
  if [ -z "$PY312" ]; then
    for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
      if "$c" -c "import sys, sysconfig, os; sys.exit(sys.version_info[:2] != (3, 12) or not os.path.exists(os.path.join(sysconfig.get_path('include'), 'Python.h')))" 2>/dev/null; then
        PY312=$c; break
      fi
    done
  fi
  # kept between packs while the patch is the same
  PATCH_SUM=$(sha256sum "$ROOT/tools/kp-0.9.0.patch" | cut -c1-16)
  [ "$(cat "$KIT/kp-prebuilt/patch.sha256" 2>/dev/null)" = "$PATCH_SUM" ] || rm -rf "$KIT/kp-prebuilt"
  if [ -n "$PY312" ] && ! ls "$KIT"/kp-prebuilt/kp.cpython-312-*.so >/dev/null 2>&1; then
    step "kp for CPython 3.12, prebuilt here as a fallback ($PY312)"
    P=$(mktemp -d); for f in "$KIT"/debs/build/*.deb "$KIT"/debs/loader/libvulkan1_*.deb; do dpkg -x "$f" "$P"; done
    PB=$(mktemp -d); "$PY" -m zipfile -e "$KIT"/wheels/pybind11-*.whl "$PB"
    bash "$ROOT/tools/gpu/build_kp.sh" --python "$PY312" --src "$KIT/src/kp-$KP_VERSION" --prefix "$P" \
      --out "$KIT/kp-prebuilt" --pybind11 "$PB"
    strip --strip-unneeded "$KIT"/kp-prebuilt/kp*.so 2>/dev/null || true
    echo "$PATCH_SUM" > "$KIT/kp-prebuilt/patch.sha256"
    rm -rf "$P" "$PB"
  elif [ -z "$PY312" ]; then
    step "no CPython 3.12 with headers here: no prebuilt kp fallback (set VKQ_PY312 to make one)"
  fi
fi

# --- 8. the manifest ---------------------------------------------------------------------
step "manifest"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo true || echo false)
"$PY" - "$KIT" "$COMMIT" "$DIRTY" "$GLSLANG_VERSION" "$QUICK" <<'EOF'
import hashlib, json, sys, time
from pathlib import Path
kit, commit, dirty, glslang, quick = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "true", sys.argv[4], sys.argv[5] == "1"
files = {}
for p in sorted(kit.rglob("*")):
    if p.is_file() and not p.name.startswith(".") and p.relative_to(kit).parts[0] not in ("out", "work"):
        files[str(p.relative_to(kit))] = {"bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()[:16]}
total = sum(f["bytes"] for f in files.values())
m = {"commit": commit, "dirty": dirty, "packed_at": time.strftime("%Y-%m-%d %H:%M:%S"), "glslang": glslang,
     "quick": quick, "python_target": "3.12", "kit_bytes": total, "files": files}
(kit / "MANIFEST.json").write_text(json.dumps(m, indent=1))
print(f"  {len(files)} files, {total / 2**20:.1f} MiB")
EOF
KIT_MIB=$(du -sm --exclude=out --exclude=work "$KIT" | cut -f1)
if ((KIT_MIB > 56)); then
  echo "pack.sh: the kit is ${KIT_MIB} MiB; the device tool carries at most 64 MiB with the whole working tree" >&2
  exit 1
fi
step "kit ready in $KIT (${KIT_MIB} MiB, $((SECONDS - T0)) s): carry \"$(basename "$KIT")\", run \"bash $(basename "$KIT")/run.sh\""

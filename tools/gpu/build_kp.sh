#!/usr/bin/env bash
# Build Kompute's Python module (kp 0.9.0 with tools/kp-0.9.0.patch applied) with CMake alone,
# against Vulkan headers/loader and fmt unpacked from Debian 12 .debs into a prefix: no package
# registry, no root, no setup.py (its distutils import fails on Python 3.12).
#
#   build_kp.sh --python PY --src KP_SOURCE_TREE --prefix DEB_PREFIX --out DIR
#               [--pybind11 SITE_DIR] [--build DIR] [--jobs N]
#
# --src      the patched kp-0.9.0 source tree (pack.sh applies the patch here, so the remote
#            machine needs no `patch`)
# --prefix   where libvulkan-dev, libvulkan1, libfmt-dev and libfmt9 were unpacked (dpkg -x)
# --pybind11 a folder holding the `pybind11` package (pack.sh carries pybind11 2.13.6, which
#            knows Python 3.12 and numpy 1 and 2); default: the one PY imports
# Writes DIR/kp.cpython-*.so. The module needs libfmt.so.9 at run time (LD_LIBRARY_PATH);
# it carries no RPATH, so it takes the machine's own Vulkan loader where there is one.
# The options are tools/setup.sh's (its environment variables for setup.py, here as -D):
# Kompute's own validation-layer switch off, the built-in Vulkan headers/fmt/pybind11 off,
# logging off, no Vulkan version probe at configure time.
set -euo pipefail
PY=python3 SRC= PREFIX= OUTDIR= PYBIND11_SITE= BUILD= JOBS=$(nproc 2>/dev/null || echo 4)
while (($#)); do
  case $1 in
    --python) PY=$2; shift 2 ;;
    --src) SRC=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --pybind11) PYBIND11_SITE=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    *) echo "build_kp.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$SRC" ] && [ -n "$PREFIX" ] && [ -n "$OUTDIR" ] || { echo "build_kp.sh: --src, --prefix and --out are required" >&2; exit 2; }
BUILD=${BUILD:-$(mktemp -d /tmp/kp-build.XXXXXX)}
mkdir -p "$OUTDIR" "$BUILD"
abs() { (cd "$1" && pwd); }    # CMake reads relative paths from its own subfolders
SRC=$(abs "$SRC") PREFIX=$(abs "$PREFIX") OUTDIR=$(abs "$OUTDIR") BUILD=$(abs "$BUILD")
[ -z "$PYBIND11_SITE" ] || PYBIND11_SITE=$(abs "$PYBIND11_SITE")
LIB=$PREFIX/usr/lib/x86_64-linux-gnu
fail() { echo "build_kp.sh: $*" >&2; exit 1; }

# the toolchain: CMake and ninja may be pip packages beside the interpreter
PATH=$(dirname "$PY"):$PATH
CMAKE=$(command -v cmake || true)
[ -n "$CMAKE" ] || CMAKE=$("$PY" -c "import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, 'cmake'))" 2>/dev/null) \
  || fail "no cmake (neither on PATH nor the cmake Python package)"
CXX_FOUND=$(command -v "${CXX:-c++}" || command -v g++ || command -v clang++ || true)
[ -n "$CXX_FOUND" ] || fail "no C++ compiler (c++, g++, clang++)"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

# Python: headers must be there (the module is built against this interpreter)
read -r PYINC PYSTD PYVER < <("$PY" -c "import sysconfig, sys; print(sysconfig.get_path('include'), sysconfig.get_path('stdlib'), '%d.%d' % sys.version_info[:2])")
[ -f "$PYINC/Python.h" ] || fail "no Python.h in $PYINC: Python $PYVER's headers are missing"
if [ -n "$PYBIND11_SITE" ]; then
  PB_DIR=$(PYTHONPATH=$PYBIND11_SITE "$PY" -m pybind11 --cmakedir)
else
  PB_DIR=$("$PY" -m pybind11 --cmakedir) || fail "pybind11 not importable by $PY"
fi
[ -f "$LIB/libvulkan.so" ] && [ -f "$PREFIX/usr/include/vulkan/vulkan.hpp" ] || fail "no Vulkan headers/loader under $PREFIX"
[ -d "$LIB/cmake/fmt" ] || fail "no fmt CMake package under $LIB/cmake/fmt"

echo "build_kp.sh: Python $PYVER ($PY), $("$CMAKE" --version | head -1), $("$CXX_FOUND" --version | head -1), pybind11 $(PYTHONPATH=${PYBIND11_SITE:-} "$PY" -c 'import pybind11; print(pybind11.__version__)'), ${GEN[1]:-make}, -j$JOBS"
# -Wno-error in the *release* flags: they come after the -Werror Kompute appends to
# CMAKE_CXX_FLAGS, so a newer compiler's new warning does not stop the build.
# CXXFLAGS as setup.py sets them: the version string the module reports as kp.__version__
CXXFLAGS="${CXXFLAGS:-} -DVERSION_INFO=\\\"0.9.0\\\"" \
"$CMAKE" -S "$SRC" -B "$BUILD" "${GEN[@]}" -Wno-dev \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG -Wno-error" \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_SKIP_RPATH=ON \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$OUTDIR" \
  -DKOMPUTE_OPT_BUILD_PYTHON=ON -DKOMPUTE_OPT_LOG_LEVEL=Off -DKOMPUTE_OPT_USE_SPDLOG=OFF \
  -DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON -DKOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON \
  -DKOMPUTE_OPT_INSTALL=OFF -DKOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
  -DKOMPUTE_OPT_USE_BUILT_IN_FMT=OFF -DKOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
  -DPYTHON_EXECUTABLE="$PY" -DPython_EXECUTABLE="$PY" -DPython3_EXECUTABLE="$PY" \
  -DPYTHON_INCLUDE_DIR="$PYINC" -DPYTHON_LIBRARY="$PYSTD" \
  -Dpybind11_DIR="$PB_DIR" -Dfmt_DIR="$LIB/cmake/fmt" \
  -DVulkan_INCLUDE_DIR="$PREFIX/usr/include" -DVulkan_LIBRARY="$LIB/libvulkan.so" \
  >"$BUILD/configure.log" 2>&1 || { tail -40 "$BUILD/configure.log" >&2; fail "cmake configure failed (log: $BUILD/configure.log)"; }
"$CMAKE" --build "$BUILD" --target kp -j "$JOBS" >"$BUILD/build.log" 2>&1 \
  || { tail -40 "$BUILD/build.log" >&2; fail "cmake build failed (log: $BUILD/build.log)"; }
for so in "$OUTDIR"/kp*.so; do
  [ -f "$so" ] || fail "the build finished but wrote no kp*.so into $OUTDIR"
  echo "build_kp.sh: built $so"
done

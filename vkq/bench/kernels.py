"""The kernel suite: every kernel family on real layer shapes, as one-node programs run by the
executor (so the same dispatches a model records), each int8 case checked bit for bit against
the numpy reference before it is timed. Beside each: vkq's own fp32 shader for the shape where
one exists, torch fp32 and int8 on the CPU (torch_peers) and ncnn fp32 on the same Vulkan
device (ncnn_peer), in the same run.

Paths: the int8 linear and conv kernels run once per way vkq can run them on this device
(paths()): plain int32 multiply-adds (backend "vulkan") and, where the device has
shaderIntegerDotProduct, the integer-dot-product variants (backend "vulkan-dot")."""
from __future__ import annotations

import math

import numpy as np

from ..device import Device, get_device, grid_1d
from ..progress import named_steps
from . import ncnn_peer, torch_peers
from .records import Record, Settings, gpu_record

VERIFY_MACS = 3e8    # check the int8 output against the numpy reference up to this size

# linear: (name, M, K, N). The seed study's K x N at M = 256, the square 1024, MiniLM at 128 tokens.
LINEAR = [("linear 256x256x512", 256, 256, 512),
          ("linear 256x1024x1024", 256, 1024, 1024),
          ("linear 256x1024x2048", 256, 1024, 2048),
          ("linear 256x2048x4096", 256, 2048, 4096),
          ("minilm qkv/out 128x384x384", 128, 384, 384),
          ("minilm ffn-up 128x384x1536", 128, 384, 1536),
          ("minilm ffn-down 128x1536x384", 128, 1536, 384),
          ("gemv 1x2048x2048", 1, 2048, 2048),         # batch 1 (a decoder's step): weight streaming
          ("gemv 1x4096x4096", 1, 4096, 4096)]
LINEAR_QUICK = [("linear 16x64x64", 16, 64, 64), ("minilm-like 8x32x96", 8, 32, 96), ("gemv 1x96x40", 1, 96, 40)]
FLOAT_LINEAR = "minilm"   # cases whose name starts with this also run linear_dynamic / weight-only

# int4 group-wise linears (vkq/ops/linear_int4.py), groups of 32, symmetric: (name, M, K, N).
# SmolLM2-135M's decoder shapes (576 x 1536 MLP, 576 x 49152 lm_head) and the square ones; its
# prefill of 128 tokens (q / o 576 x 576, the MLP's up and down) on the tiled GEMM.
INT4 = [("int4 gemv 1x576x1536", 1, 576, 1536), ("int4 gemv 1x1536x576", 1, 1536, 576),
        ("int4 gemv 1x576x49152", 1, 576, 49152), ("int4 gemv 1x2048x2048", 1, 2048, 2048),
        ("int4 gemv 1x4096x4096", 1, 4096, 4096), ("int4 gemm 128x576x576", 128, 576, 576),
        ("int4 gemm 128x576x1536", 128, 576, 1536), ("int4 gemm 128x1536x576", 128, 1536, 576)]
INT4_QUICK = [("int4 gemv 1x96x40", 1, 96, 40), ("int4 gemm 8x64x37", 8, 64, 37)]   # M = 8: the GEMM
INT4_GROUP = 32

# conv: name -> (N, C, H, W, OC, K, stride, pad, groups)
CONV = {"resnet18 conv3x3 64->64 @56": (1, 64, 56, 56, 64, 3, 1, 1, 1),
        "resnet18 stem 7x7 s2 3->64 @224": (1, 3, 224, 224, 64, 7, 2, 3, 1),
        "mobilenetv2 pw 16->96 @112": (1, 16, 112, 112, 96, 1, 1, 0, 1),
        "mobilenetv2 pw 96->24 @56": (1, 96, 56, 56, 24, 1, 1, 0, 1),
        "mobilenetv2 dw3x3 32 @112 s1": (1, 32, 112, 112, 32, 3, 1, 1, 32),
        "mobilenetv2 dw3x3 96 @112 s2": (1, 96, 112, 112, 96, 3, 2, 1, 96),
        "mobilenetv2 dw3x3 960 @7 s1": (1, 960, 7, 7, 960, 3, 1, 1, 960)}
CONV_QUICK = {"conv3x3 8->16 @12": (1, 8, 12, 12, 16, 3, 1, 1, 1),
              "pw 16->8 @10": (1, 16, 10, 10, 8, 1, 1, 0, 1),
              "dw3x3 16 @12 s2": (1, 16, 12, 12, 16, 3, 2, 1, 16)}

# memory-bound: name -> shape (add), (kind, shape, kernel, stride, pad) (pools), (op, shape) (io).
# The layer shapes of the models, and 4 MiB int8 tensors (what a bandwidth target is held on).
ADD = {"mobilenetv2 add 24 @56": (1, 24, 56, 56), "resnet18 add 64 @56": (1, 64, 56, 56),
       "add 256 @128 (4 MiB)": (1, 256, 128, 128)}
ADD_QUICK = {"add 8 @12": (1, 8, 12, 12)}
POOL = {"resnet18 maxpool 3x3 s2 64 @112": ("max", (1, 64, 112, 112), 3, 2, 1),
        "maxpool 3x3 s2 64 @256 (4 MiB)": ("max", (1, 64, 256, 256), 3, 2, 1),
        "mobilenetv2 global avgpool 1280 @7": ("global", (1, 1280, 7, 7), 7, 1, 0),
        "resnet18 global avgpool 512 @7": ("global", (1, 512, 7, 7), 7, 1, 0)}
POOL_QUICK = {"maxpool 3x3 s2 8 @12": ("max", (1, 8, 12, 12), 3, 2, 1),
              "global avgpool 32 @5": ("global", (1, 32, 5, 5), 5, 1, 0)}
IO = {"quantize 256 @128 (4 MiB)": ("quantize", (1, 256, 128, 128)),
      "dequantize 256 @128 (4 MiB)": ("dequantize", (1, 256, 128, 128)),
      "repack 4W4C->4H4W 256 @128 (4 MiB)": ("repack", (1, 256, 128, 128))}
IO_QUICK = {"quantize 8 @12x13": ("quantize", (1, 8, 12, 13)), "dequantize 8 @12x13": ("dequantize", (1, 8, 12, 13)),
            "repack 8 @12x13": ("repack", (1, 8, 12, 13))}


def kernel_cases(quick: bool) -> list[tuple[str, str, tuple]]:
    """(family, name, parameters) of every kernel case, in the order they run."""
    lin, conv, add, pool, io = ((LINEAR_QUICK, CONV_QUICK, ADD_QUICK, POOL_QUICK, IO_QUICK) if quick
                                else (LINEAR, CONV, ADD, POOL, IO))
    i4 = INT4_QUICK if quick else INT4
    return ([("linear", n, (m, k, nn)) for n, m, k, nn in lin] + [("int4", n, (m, k, nn)) for n, m, k, nn in i4]
            + [("conv", n, p) for n, p in conv.items()]
            + [("add", n, p) for n, p in add.items()] + [("pool", n, p) for n, p in pool.items()]
            + [("io", n, p) for n, p in io.items()])


def run_kernels(s: Settings, show_progress: bool = True) -> list[Record]:
    """The kernel suite on s.device, with the CPU and ncnn peers in the same run."""
    run = {"linear": bench_linear, "int4": bench_int4, "conv": bench_conv, "add": bench_add, "pool": bench_pool, "io": bench_io}
    cases = [c for c in kernel_cases(s.quick) if not s.only or s.only in c[1] or s.only == c[0]]
    records = []
    for family, name, params in (named_steps(cases, "kernels", "kernel", lambda c: c[1][:40]) if show_progress
                                 else cases):
        records += run[family](s, name, params)
    return records


# -- paths: with and without the integer dot product ------------------------------------
def paths(device: Device) -> list[tuple[str, Device]]:
    """(backend, device) for each way vkq runs an int8 kernel on this physical device:
    ("vulkan", opened without the integer dot product) and, where the device can enable
    shaderIntegerDotProduct, ("vulkan-dot", opened with it)."""
    out = [("vulkan", get_device(device.info.index, dot_product=False))]
    if "shaderIntegerDotProduct" in device.features_enabled:
        out.append(("vulkan-dot", get_device(device.info.index, dot_product=True)))
    return out


def int8_roof(dot_variant: bool) -> str:
    """The compute roof an int8 kernel is judged against: the dot product's where it dispatches a
    DOT variant (a kernel without one, depthwise, runs the plain shader on the dot-product path
    too, and is judged against the int32 roof there as well)."""
    return "dot4_gops" if dot_variant else "int32_gops"


# -- one-node programs through the executor ---------------------------------------------
def executor_steps(device, program, inputs, verify: bool):
    """Build a one-program VulkanExecutor, run it once (checked bit for bit against the numpy
    reference when verify), and return its dispatches."""
    from ..executor import VulkanExecutor, run_reference
    ex = VulkanExecutor(program, device)
    got = ex(*inputs)
    if verify:
        want = run_reference(program, *inputs)
        if not np.array_equal(got, want) and not (got.dtype.kind == "f" and np.allclose(got, want, 1e-3, 1e-3)):
            raise AssertionError(f"{program.nodes[0].op} on {device}: the Vulkan output differs from the reference")
    return [step for seg in ex.segments if seg[0] == "vulkan" for step in seg[1].steps]


def _device_bytes(spec) -> int:
    """A tensor's bytes on the device (int8 packed). A float64 host constant (a bias that keeps
    its fraction) reaches the device inside the op's int32 per-channel table, a word an element."""
    return 4 * (int(np.prod(spec.shape)) if spec.dtype == "float64" else spec.device_words())


def program_bytes(program) -> int:
    """Bytes a program's nodes must move at least: every tensor they read or write (inputs,
    weights and per-channel tables, outputs) once, at its size on the device."""
    names = dict.fromkeys(t for n in program.nodes for t in n.inputs + n.outputs)
    return sum(_device_bytes(program.tensors[t]) for t in names)


def vkq_records(s: Settings, name, shape, dtype, program, inputs, ops, compute, verify, kind,
                on_paths=True, nbytes=None) -> list[Record]:
    """One record per path (on_paths) or on s.device: `program` run by the executor, timed by
    timestamps. compute: "int8" (the path's integer roof) or a roof key. kind: what the
    targets hold the kernel to (vkq.bench.report.targets): "gemm", "gemv", "depthwise",
    "memory", or "" for none. nbytes: the bytes the kernels move (default program_bytes)."""
    runs = paths(s.device) if on_paths else [("vulkan", s.device)]
    largest = max(_device_bytes(program.tensors[t]) for n in program.nodes for t in n.inputs + n.outputs)
    out = []
    for backend, dev in runs:
        steps = executor_steps(dev, program, inputs, verify)
        dot_variant = any("DOT" in st.defines for st in steps)
        texel_variant = any("TEXEL" in st.defines for st in steps)
        roof = int8_roof(dot_variant) if compute == "int8" else compute
        out.append(gpu_record(s, "kernels", name, shape, dtype, steps, ops, nbytes or program_bytes(program), roof,
                              {"op": program.nodes[0].op, "kind": kind, "largest_tensor_bytes": largest,
                               "dot_variant": dot_variant, "texel_variant": texel_variant},
                              device=dev, backend=backend))
    return out


# -- linear ---------------------------------------------------------------------------
class _LinearContext:
    """What an op's build() needs from vkq.executor.BuildContext, over buffers made here
    (for our fp32 GEMM, which is a shader variant, not a registered op)."""

    def __init__(self, device):
        self.device, self.uploads = device, []

    def const_buffer(self, array, dtype=None):
        buf = self.device.buffer(np.ascontiguousarray(array, dtype=dtype))
        self.uploads.append(buf)
        return buf


def _linear_data(m, k, n, rng):
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, n).astype(np.float32)
    b = rng.normal(0, 1, n).astype(np.float32)
    return w, ws, b


def linear_q8_program(m, k, n, rng):
    """A one-node linear_q8 program (int8 4H4W in and out) with random data, and its input."""
    from ..ops.linear import linear_q8_params
    from ..program import Node, Program, TensorSpec
    w, ws, b = _linear_data(m, k, n, rng)
    x_scale = 0.05
    out_scale = 3.0 * math.sqrt(k) * x_scale * 74 * 0.011 / 40    # keeps most outputs inside int8
    bias, mult, shift, qmin, qmax = linear_q8_params(x_scale, ws, out_scale, b, None, 3)
    tensors = {"x": TensorSpec((m, k), "int8", "4H4W"), "y": TensorSpec((m, n), "int8", "4H4W"),
               "w": TensorSpec((n, k), "int8", "4H4W"), "b": TensorSpec((n,), str(bias.dtype)),
               "m": TensorSpec((n,), "int32"), "s": TensorSpec((n,), "int32")}
    node = Node("linear_q8", ["x", "w", "b", "m", "s"], ["y"], dict(x_zp=-2, out_zp=3, qmin=qmin, qmax=qmax))
    prog = Program(tensors, [node], ["x"], ["y"], {"w": w, "b": bias, "m": mult, "s": shift})
    return prog, rng.integers(-128, 128, (m, k)).astype(np.int8)


def linear_float_program(op, m, k, n, rng):
    """linear_dynamic / linear_weight_only: float x and y, int8 weights with per-channel scales."""
    from ..program import Node, Program, TensorSpec
    w, ws, b = _linear_data(m, k, n, rng)
    tensors = {"x": TensorSpec((m, k)), "y": TensorSpec((m, n)), "w": TensorSpec((n, k), "int8", "4H4W"),
               "s": TensorSpec((n,)), "b": TensorSpec((n,))}
    prog = Program(tensors, [Node(op, ["x", "w", "s", "b"], ["y"])], ["x"], ["y"], {"w": w, "s": ws, "b": b})
    return prog, rng.normal(0, 1, (m, k)).astype(np.float32)


def linear_f32_steps(device, m, k, n, rng, verify: bool):
    """Our plain fp32 GEMM (shaders/linear_float.comp W_F32: linear_q8's tiling with float x and
    weights), checked against numpy within float rounding when verify; (steps, bytes it moves)."""
    from ..ops import linear
    w, ws, b = _linear_data(m, k, n, rng)
    wf = w.astype(np.float32) * ws[:, None]
    x = rng.normal(0, 1, (m, k)).astype(np.float32)
    ctx = _LinearContext(device)
    bx, by = device.buffer(x), device.buffer(size=m * n, dtype=np.float32)
    step = linear.float_gemm(ctx, bx, m, k, wf, np.ones(n, np.float32), b, by)
    device.run([step], upload=ctx.uploads + [bx], download=[by])
    if verify:
        np.testing.assert_allclose(by.read().reshape(m, n), x.astype(np.float64) @ wf.T.astype(np.float64) + b,
                                   rtol=1e-3, atol=1e-3)
    return [step], sum(buf.nbytes for buf in ctx.uploads + [bx, by])


def bench_linear(s: Settings, name, mkn) -> list[Record]:
    m, k, n = mkn
    rng = np.random.default_rng(0)
    shape, ops = f"M{m} K{k} N{n}", 2 * m * k * n
    verify = m * k * n <= VERIFY_MACS
    prog, x = linear_q8_program(m, k, n, rng)
    kind = "gemv" if m == 1 else "gemm" if m >= 128 else ""
    out = vkq_records(s, name, shape, "int8", prog, [x], ops, "int8", verify, kind)
    steps, nbytes = linear_f32_steps(s.device, m, k, n, rng, verify)
    out.append(gpu_record(s, "kernels", name, shape, "fp32", steps, ops, nbytes, "fp32_gflops",
                          {"kernel": "linear_float W_F32"}))
    if name.startswith(FLOAT_LINEAR) or s.quick:
        for op, dtype in (("linear_dynamic", "int8-dynamic"), ("linear_weight_only", "int8-weight-only")):
            prog, xf = linear_float_program(op, m, k, n, rng)
            out += vkq_records(s, name, shape, dtype, prog, [xf], ops,
                               "int8" if op == "linear_dynamic" else "fp32_gflops", verify, kind,
                               on_paths=op == "linear_dynamic")
    out += torch_peers.linear(s, name, shape, m, k, n, ops)
    out += ncnn_peer.kernel(s, name, shape, ops, *ncnn_peer.linear_layer(m, k, n, rng))
    return out


# -- int4 linears ---------------------------------------------------------------------
def int4_program(op, m, k, n, rng, group_size=INT4_GROUP):
    """A one-node linear_int4 / linear_8da4w program (symmetric int4 groups), its input, and the
    bytes its kernels move: the packed weights and group scales (the symmetric kernel reads no
    zero points), the bias, x and y (8da4w: also x's int8 rows, written and read)."""
    from ..int4 import quantize_groups
    from ..ops.linear_int4 import int4_constants
    from ..program import Node, Program, TensorSpec
    gw = quantize_groups(rng.normal(0, 1, (n, k)).astype(np.float32), group_size, True)
    consts = int4_constants(gw, rng.normal(0, 1, n))
    tensors = {"x": TensorSpec((m, k)), "y": TensorSpec((m, n)),
               **{c: TensorSpec(a.shape, str(a.dtype)) for c, a in consts.items()}}
    prog = Program(tensors, [Node(op, ["x", *consts], ["y"], {"group_size": group_size})], ["x"], ["y"], consts)
    nbytes = gw.qweight.nbytes + gw.scale.nbytes + 4 * n + 4 * m * k + 4 * m * n
    if op == "linear_8da4w":
        nbytes += 2 * (-(-m // 4) * 4) * (-(-k // 4) * 4) + 8 * m
    return prog, rng.normal(0, 1, (m, k)).astype(np.float32), nbytes


def bench_int4(s: Settings, name, mkn) -> list[Record]:
    """linear_int4 (float x; against the fp32 roof) and linear_8da4w (on each int8 path) at a
    shape; "gemv" rows (M = 1) are held to the copy-bandwidth target on their weight bytes."""
    m, k, n = mkn
    rng = np.random.default_rng(0)
    shape, ops = f"M{m} K{k} N{n} G{INT4_GROUP}", 2 * m * k * n
    verify = m * k * n <= VERIFY_MACS
    kind = "gemv" if m == 1 else "gemm" if m >= 128 else ""
    out = []
    for op, dtype, compute in (("linear_int4", "int4", "fp32_gflops"), ("linear_8da4w", "8da4w", "int8")):
        prog, x, nbytes = int4_program(op, m, k, n, rng)
        out += vkq_records(s, name, shape, dtype, prog, [x], ops, compute, verify, kind,
                           on_paths=op == "linear_8da4w", nbytes=nbytes)
    return out


# -- conv -----------------------------------------------------------------------------
def conv_program(shape, rng):
    """A one-node conv2d_q8 program with random int8 data, and its input."""
    from ..program import Node, Program, TensorSpec
    from ..quant import quantize_multipliers
    n, c, h, w, oc, k, stride, pad, groups = shape
    oh, ow = conv_output_hw(shape)
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    weight = rng.integers(-127, 128, (oc, c // groups, k, k)).astype(np.int8)
    bias = rng.integers(-1000, 1000, oc).astype(np.int32)
    m, sh = quantize_multipliers(np.full(oc, 1.0 / (40 * np.sqrt(c // groups * k * k) * 64)))
    tensors = {"x": TensorSpec((n, c, h, w), "int8", "4W4C"), "y": TensorSpec((n, oc, oh, ow), "int8", "4W4C"),
               "w": TensorSpec(weight.shape, "int8", "4W4C"), "b": TensorSpec((oc,), "int32"),
               "m": TensorSpec((oc,), "int32"), "s": TensorSpec((oc,), "int32")}
    attrs = dict(stride=[stride] * 2, padding=[pad] * 2, dilation=[1, 1], groups=groups, x_zp=-7, out_zp=3,
                 qmin=-128, qmax=127)
    prog = Program(tensors, [Node("conv2d_q8", ["x", "w", "b", "m", "s"], ["y"], attrs)], ["x"], ["y"],
                   {"w": weight, "b": bias, "m": m, "s": sh})
    return prog, x


def conv_output_hw(shape) -> tuple[int, int]:
    n, c, h, w, oc, k, stride, pad, groups = shape
    return (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1


def conv_macs(shape) -> int:
    n, c, h, w, oc, k, stride, pad, groups = shape
    oh, ow = conv_output_hw(shape)
    return n * oc * oh * ow * (c // groups) * k * k


def conv_f32_steps(device, shape, rng, verify: bool):
    """The fp32 direct conv with conv2d_general's tiling (shaders/bench_conv2d_f32.comp: TOC 16,
    2x4 positions, stride 1, groups 1), checked against float64 numpy when verify; (steps,
    bytes it moves)."""
    from ..ops import conv
    n, c, h, w, oc, k, stride, pad, groups = shape
    g = conv.ConvGeometry.of((n, c, h, w), (oc, c, k, k), (1, 1), (pad, pad), (1, 1), 1)
    toc, th, tw = 16, 2, 4
    G, defines, local = conv._lane_group(device)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    c4, tiles = g.c4, -(-oc // toc)
    xp = np.zeros((n, c4 * 4, h, w), np.float32)
    xp[:, :c] = x
    wp = np.zeros((tiles * toc, c4 * 4, k, k), np.float32)
    wp[:oc, :c] = weight
    # (t, o, c4, i, kh, kw) -> (t, c4, kh, kw, o, i)
    wp = wp.reshape(tiles, toc, c4, 4, k, k).transpose(0, 2, 4, 5, 1, 3).reshape(-1)
    bx = device.buffer(xp.reshape(n, c4, 4, h, w).transpose(0, 3, 4, 1, 2).reshape(-1))
    bw = device.buffer(np.concatenate([wp, np.zeros(G, np.float32)]))
    by = device.buffer(size=n * g.oh * g.ow * -(-oc // 4) * 4, dtype=np.float32)
    lane_groups = n * tiles * -(-(-(-g.oh // th) * -(-g.ow // tw)) // G)
    d = device.dispatch("bench_conv2d_f32", [bx, bw, by], grid_1d(lane_groups * G, local), local=(local,),
                        spec=(G, toc, th, tw, k, k), push=(np.array([n, c, h, w]), np.array([n, oc, g.oh, g.ow]), pad),
                        defines=defines)
    device.run([d], upload=[bx, bw], download=[by])
    if verify:
        got = by.read().reshape(n, g.oh, g.ow, -1)[..., :oc].transpose(0, 3, 1, 2)
        np.testing.assert_allclose(got, _conv_f64(x, weight, pad), rtol=1e-4, atol=1e-3)
    return [d], bx.nbytes + bw.nbytes + by.nbytes


def _conv_f64(x, weight, pad):
    """float64 conv2d, stride 1, zero padding (numpy)."""
    n, c, h, w = x.shape
    oc, _, k, _ = weight.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    out = np.zeros((n, oc, oh, ow))
    for i in range(k):
        for j in range(k):
            out += np.einsum("oc,nchw->nohw", weight[:, :, i, j].astype(np.float64), xp[:, :, i:i + oh, j:j + ow])
    return out


def _conv_shape_str(p) -> str:
    n, c, h, w, oc, k, stride, pad, groups = p
    return f"{n}x{c}x{h}x{w} -> {oc} k{k} s{stride} p{pad} g{groups}"


def bench_conv(s: Settings, name, p) -> list[Record]:
    rng = np.random.default_rng(0)
    shape, ops = _conv_shape_str(p), 2 * conv_macs(p)
    verify = conv_macs(p) <= VERIFY_MACS
    prog, x = conv_program(p, rng)
    n, c, h, w, oc, k, stride, pad, groups = p
    out = vkq_records(s, name, shape, "int8", prog, [x], ops, "int8", verify,
                      "depthwise" if groups == c == oc else "gemm" if groups == 1 else "")
    if stride == 1 and groups == 1:   # what bench_conv2d_f32 covers
        steps, nbytes = conv_f32_steps(s.device, p, rng, verify)
        out.append(gpu_record(s, "kernels", name, shape, "fp32", steps, ops, nbytes, "fp32_gflops",
                              {"kernel": "bench_conv2d_f32"}))
    out += torch_peers.conv(s, name, shape, p, ops)
    out += ncnn_peer.kernel(s, name, shape, ops, *ncnn_peer.conv_layer(p, rng))
    return out


# -- add and pools (memory-bound) -----------------------------------------------------
def bench_add(s: Settings, name, shape) -> list[Record]:
    """add_q8 on two int8 tensors of one shape: 2 reads + 1 write of the packed tensors; one op
    an element."""
    from ..ops.eltwise import add_q8_params
    from ..program import Node, Program, TensorSpec
    rng = np.random.default_rng(0)
    spec = TensorSpec(tuple(shape), "int8", "4W4C")
    prog = Program({"a": spec, "b": spec, "y": spec},
                   [Node("add_q8", ["a", "b"], ["y"], add_q8_params(0.05, 3, 0.04, -5, 0.08, 1))], ["a", "b"], ["y"], {})
    a, b = (rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2))
    elems = int(np.prod(shape))
    sh = "x".join(map(str, shape))
    out = vkq_records(s, name, sh, "int8", prog, [a, b], elems, "int32_gops", True, "memory", on_paths=False)
    return out + torch_peers.add(s, name, sh, shape, elems)


def bench_pool(s: Settings, name, p) -> list[Record]:
    """max_pool2d_q8 (k x k, stride, padding) or the global adaptive_avg_pool2d_q8: one read of
    the input and one write of the output; ops = window taps."""
    from ..ops.pool import adaptive_avg_pool2d_params, max_pool2d_params, pool2d_output_shape
    from ..program import Node, Program, TensorSpec
    kind, shape, k, stride, pad = p
    rng = np.random.default_rng(0)
    if kind == "max":
        attrs, op = max_pool2d_params(k, stride, pad), "max_pool2d_q8"
        out_shape = pool2d_output_shape(shape, k, stride, pad)
        taps = int(np.prod(out_shape)) * k * k
    else:
        attrs, op = adaptive_avg_pool2d_params(0.05, 3, 0.02, -1, (1, 1)), "adaptive_avg_pool2d_q8"
        out_shape = (*shape[:2], 1, 1)
        taps = int(np.prod(shape))
    prog = Program({"x": TensorSpec(tuple(shape), "int8", "4W4C"), "y": TensorSpec(out_shape, "int8", "4W4C")},
                   [Node(op, ["x"], ["y"], attrs)], ["x"], ["y"], {})
    x = rng.integers(-128, 128, shape).astype(np.int8)
    sh = "x".join(map(str, shape)) + (f" k{k} s{stride} p{pad}" if kind == "max" else " -> 1x1")
    out = vkq_records(s, name, sh, "int8", prog, [x], taps, "int32_gops", True, "memory", on_paths=False)
    return out + torch_peers.pool(s, name, sh, kind, shape, out_shape, k, stride, pad, taps)


def bench_io(s: Settings, name, p) -> list[Record]:
    """quantize (float32 -> packed int8), dequantize (packed int8 -> float32), repack (4W4C ->
    4H4W): one read and one write; one op an element."""
    from ..program import Node, Program, TensorSpec
    op, shape = p
    rng = np.random.default_rng(0)
    f, q = TensorSpec(shape), TensorSpec(shape, "int8", "4W4C")
    attrs = {"scale": 0.05, "zero_point": 3}
    if op == "quantize":
        tensors, x = {"x": f, "y": q}, rng.normal(0, 3, shape).astype(np.float32)
    elif op == "dequantize":
        tensors, x = {"x": q, "y": f}, rng.integers(-128, 128, shape).astype(np.int8)
    else:
        tensors, x, attrs = {"x": q, "y": TensorSpec(shape, "int8", "4H4W")}, \
            rng.integers(-128, 128, shape).astype(np.int8), {}
    prog = Program(tensors, [Node(op, ["x"], ["y"], attrs)], ["x"], ["y"], {})
    elems = int(np.prod(shape))
    sh = "x".join(map(str, shape))
    out = vkq_records(s, name, sh, "int8", prog, [x], elems, "int32_gops", True, "memory", on_paths=False)
    return out + torch_peers.io(s, name, sh, op, shape, elems)

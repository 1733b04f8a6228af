"""PyTorch on the CPU, the kernel suite's peers: fp32 and int8 (quantized engine x86), with
CPU_THREADS threads, wall clock per call. Bytes moved count fp32 tensors at 4 bytes an element
and int8 ones at 1 (per-channel tables at 4)."""
from __future__ import annotations

from .records import Record, Settings, wall_record
from .timing import cpu_name, torch_threads


def linear(s: Settings, name, shape, m, k, n, ops) -> list[Record]:
    """F.linear in fp32, and torch.ops.quantized.linear (x86 engine, prepacked per-channel int8
    weights, quint8 activations)."""
    torch = torch_threads()
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g) * 0.05, torch.randn(n, generator=g)
    cpu = cpu_name()
    elems = m * k + n * k + m * n
    with torch.inference_mode():
        out = [wall_record(s, "kernels", name, shape, "fp32", "torch-cpu", cpu, lambda: F.linear(x, w, b), ops,
                           {"kernel": "F.linear"}, 4 * (elems + n))]
        torch.backends.quantized.engine = "x86"
        wq = torch.quantize_per_channel(w, w.abs().amax(1) / 127, torch.zeros(n, dtype=torch.long), 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(wq, b)
        xq = torch.quantize_per_tensor(x, float(x.abs().max()) / 127, 128, torch.quint8)
        scale = float((x @ w.T).abs().max()) / 127
        out.append(wall_record(s, "kernels", name, shape, "int8", "torch-cpu", cpu,
                               lambda: torch.ops.quantized.linear(xq, packed, scale, 128), ops,
                               {"kernel": "quantized.linear (x86)"}, elems + 4 * n))
    return out


def conv(s: Settings, name, shape, p, ops) -> list[Record]:
    """F.conv2d in fp32, and torch.ao.nn.quantized.Conv2d (x86 engine, per-channel int8
    weights, quint8 activations)."""
    torch = torch_threads()
    import torch.ao.nn.quantized as nnq
    import torch.nn.functional as F
    n, c, h, w, oc, k, stride, pad, groups = p
    g = torch.Generator().manual_seed(0)
    x, wt, b = torch.randn(n, c, h, w, generator=g), torch.randn(oc, c // groups, k, k, generator=g) * 0.1, torch.zeros(oc)
    cpu = cpu_name()
    with torch.inference_mode():
        y = F.conv2d(x, wt, b, stride, pad, 1, groups)
        elems = x.numel() + wt.numel() + y.numel()
        out = [wall_record(s, "kernels", name, shape, "fp32", "torch-cpu", cpu,
                           lambda: F.conv2d(x, wt, b, stride, pad, 1, groups), ops, {"kernel": "F.conv2d"},
                           4 * (elems + oc))]
        torch.backends.quantized.engine = "x86"
        qc = nnq.Conv2d(c, oc, k, stride, pad, groups=groups)
        qc.set_weight_bias(torch.quantize_per_channel(wt, wt.abs().amax((1, 2, 3)) / 127,
                                                      torch.zeros(oc, dtype=torch.long), 0, torch.qint8), b)
        qc.scale, qc.zero_point = 0.1, 128
        xq = torch.quantize_per_tensor(x, float(x.abs().max()) / 127, 128, torch.quint8)
        out.append(wall_record(s, "kernels", name, shape, "int8", "torch-cpu", cpu, lambda: qc(xq), ops,
                               {"kernel": "quantized.Conv2d (x86)"}, elems + 4 * oc))
    return out


def add(s: Settings, name, sh, shape, elems) -> list[Record]:
    """torch.add in fp32 and quantized.add (x86) on quint8: 2 reads + 1 write."""
    torch = torch_threads()
    cpu = cpu_name()
    with torch.inference_mode():
        x, y = torch.randn(*shape), torch.randn(*shape)
        out = [wall_record(s, "kernels", name, sh, "fp32", "torch-cpu", cpu, lambda: torch.add(x, y), elems,
                           {"kernel": "torch.add"}, 12 * elems)]
        torch.backends.quantized.engine = "x86"
        qx, qy = (torch.quantize_per_tensor(t, 0.05, 128, torch.quint8) for t in (x, y))
        out.append(wall_record(s, "kernels", name, sh, "int8", "torch-cpu", cpu,
                               lambda: torch.ops.quantized.add(qx, qy, 0.08, 128), elems,
                               {"kernel": "quantized.add (x86)"}, 3 * elems))
    return out


def pool(s: Settings, name, sh, kind, shape, out_shape, k, stride, pad, taps) -> list[Record]:
    """F.max_pool2d / F.adaptive_avg_pool2d on fp32 and on quint8 tensors."""
    import numpy as np
    torch = torch_threads()
    import torch.nn.functional as F
    cpu = cpu_name()
    fn = (lambda t: F.max_pool2d(t, k, stride, pad)) if kind == "max" else (lambda t: F.adaptive_avg_pool2d(t, 1))
    elems_moved = int(np.prod(shape)) + int(np.prod(out_shape))
    with torch.inference_mode():
        xf = torch.randn(*shape)
        out = [wall_record(s, "kernels", name, sh, "fp32", "torch-cpu", cpu, lambda: fn(xf), taps,
                           {"kernel": "F.max_pool2d" if kind == "max" else "F.adaptive_avg_pool2d"},
                           4 * elems_moved)]
        xq = torch.quantize_per_tensor(xf, 0.05, 128, torch.quint8)
        out.append(wall_record(s, "kernels", name, sh, "int8", "torch-cpu", cpu, lambda: fn(xq), taps,
                               {"kernel": "quantized " + ("max_pool2d" if kind == "max" else "adaptive_avg_pool2d")},
                               elems_moved))
    return out


def io(s: Settings, name, sh, op, shape, elems) -> list[Record]:
    """The same crossing in torch: quantize_per_tensor to qint8 (fp32 in), dequantize (fp32
    out), and for repack a layout change of an int8 tensor (NCHW -> channels_last copy); the
    "fp32" row of each is the plain fp32 copy of the tensor beside it."""
    torch = torch_threads()
    cpu = cpu_name()
    with torch.inference_mode():
        x = torch.randn(*shape)
        xq = torch.quantize_per_tensor(x, 0.05, 3, torch.qint8)
        fn, moved, kernel = {
            "quantize": (lambda: torch.quantize_per_tensor(x, 0.05, 3, torch.qint8), 5 * elems, "quantize_per_tensor"),
            "dequantize": (lambda: xq.dequantize(), 5 * elems, "dequantize"),
            "repack": (lambda: xq.contiguous(memory_format=torch.channels_last), 2 * elems,
                       "contiguous(channels_last)")}[op]
        return [wall_record(s, "kernels", name, sh, "fp32", "torch-cpu", cpu, lambda: x.clone(), elems,
                            {"kernel": "clone"}, 8 * elems),
                wall_record(s, "kernels", name, sh, "int8", "torch-cpu", cpu, fn, elems, {"kernel": kernel}, moved)]

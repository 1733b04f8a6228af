"""ncnn, the peer on the same Vulkan device (and on the CPU). Networks are written in ncnn's
own format (param text + weight bytes) from PyTorch modules: one layer for the kernel cases
(conv_layer, linear_layer), a whole CNN for the models (to_ncnn). fp16 storage and arithmetic
are switched off, so ncnn runs fp32 like our fp32 shaders and torch."""
from __future__ import annotations

import os
import struct

import numpy as np

from ..device import Device
from .records import Record, Settings, note, wall_record, with_roofline
from .timing import CPU_THREADS


def module():
    """The ncnn module, or None when it is not installed. Its bundled OpenMP busy-waits
    unless OMP_WAIT_POLICY=passive, which distorts 2-thread timings of everything else."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        import ncnn
    except ImportError:
        return None
    return ncnn


def _gpu_count(ncnn) -> int:
    """ncnn.get_gpu_count(), with the device listing ncnn prints on first use kept off the terminal."""
    fd = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            return ncnn.get_gpu_count()
    finally:
        os.dup2(fd, 2)
        os.close(fd)


def _gpu_assisted_validation() -> bool:
    """Whether the Khronos layer's GPU-assisted validation is switched on for this process."""
    return ("VK_LAYER_KHRONOS_validation" in os.environ.get("VK_INSTANCE_LAYERS", "")
            and "GPU_ASSISTED" in os.environ.get("VK_LAYER_ENABLES", ""))


def gpu_index(device: Device):
    """(ncnn's index of the same Vulkan device, or None, and why not)."""
    ncnn = module()
    if ncnn is None:
        return None, "ncnn is not installed (pip install ncnn)"
    if _gpu_assisted_validation():
        # ncnn's pipelines under the layer's instrumentation report "descriptor uninitialized"
        # and return wrong numbers (a ResNet at cosine 0.68 on lavapipe): not a peer to time.
        return None, "ncnn's Vulkan path is not run under GPU-assisted validation (it misbehaves there)"
    for i in range(_gpu_count(ncnn)):
        if ncnn.get_gpu_info(i).device_name() == device.info.name:
            return i, ""
    return None, f"ncnn does not see {device.info.name}"


class NcnnNet:
    """An ncnn network (param text, weight bytes) on ncnn's Vulkan device `gpu`, or on the CPU
    (gpu None) with CPU_THREADS threads; call it with one float32 array (C, H, W) or (H, W)."""

    def __init__(self, param: str, weights: bytes, out_blob: str, gpu=None):
        self._ncnn = ncnn = module()
        self.net, self.out = ncnn.Net(), out_blob
        opt = self.net.opt
        opt.use_vulkan_compute = gpu is not None
        opt.num_threads = CPU_THREADS
        for a in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic"):
            setattr(opt, a, False)
        if gpu is not None:
            self.net.set_vulkan_device(gpu)
        if self.net.load_param_mem(param) != 0:
            raise RuntimeError("ncnn rejected the network's param text")
        self._weights = weights            # the CPU path may point into it: keep it alive
        self.net.load_model_mem(weights)

    def __call__(self, x):
        ex = self.net.create_extractor()
        ex.input("in0", self._ncnn.Mat(np.ascontiguousarray(x, np.float32)))
        rc, y = ex.extract(self.out)
        if rc != 0:
            raise RuntimeError(f"ncnn extract failed ({rc})")
        return np.array(y)

    def close(self):
        self.net.clear()


# -- the param format ------------------------------------------------------------------
def _text(layers) -> str:
    """ncnn's param format: magic, layer and blob counts, one line a layer."""
    blobs = sum(len(outs) for _, _, _, outs, _ in layers)
    lines = ["7767517", f"{len(layers)} {blobs}"]
    lines += [f"{kind} {name} {len(ins)} {len(outs)} {' '.join(ins + outs)} {params}".rstrip()
              for kind, name, ins, outs, params in layers]
    return "\n".join(lines) + "\n"


def _weights(*arrays, tagged=True) -> bytes:
    """A weight blob: a zero tag (= raw float32), then the data; biases go untagged."""
    data = b"".join(np.ascontiguousarray(a, np.float32).tobytes() for a in arrays)
    return (struct.pack("<I", 0) if tagged else b"") + data


RELU, RELU6 = "9=1", "9=3 -23310=2,0.000000e+00,6.000000e+00"   # fused activations


def _conv(name, bottom, weight, bias, stride, pad, groups, act=""):
    """(layer, weight bytes) of a Convolution / ConvolutionDepthWise with bias."""
    oc, _, kh, kw = weight.shape
    kind = "ConvolutionDepthWise" if groups > 1 else "Convolution"
    params = (f"0={oc} 1={kw} 11={kh} 3={stride} 13={stride} 4={pad} 14={pad} 15={pad} 16={pad} 5=1 "
              f"6={weight.size}" + (f" 7={groups}" if groups > 1 else "") + (f" {act}" if act else ""))
    return (kind, name, [bottom], [name], params), _weights(weight) + _weights(bias, tagged=False)


# -- one layer: the kernel suite's peer ----------------------------------------------------
def conv_layer(p, rng):
    """(param, weights, input, output blob, output elements) of one conv layer."""
    n, c, h, w, oc, k, stride, pad, groups = p
    layer, weights = _conv("out", "in0", rng.standard_normal((oc, c // groups, k, k)).astype(np.float32),
                           np.zeros(oc, np.float32), stride, pad, groups)
    param = _text([("Input", "in0", [], ["in0"], f"0={w} 1={h} 2={c}"), layer])
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return param, weights, rng.standard_normal((c, h, w)).astype(np.float32), "out", oc * oh * ow


def linear_layer(m, k, n, rng):
    """One Gemm (y = x W^T + b, W and b constant): faster than InnerProduct on lavapipe."""
    w, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    param = _text([("Input", "in0", [], ["in0"], f"0={k} 1={m}"),
                   ("Gemm", "out", ["in0"], ["out"], f"0=1.0 1=1.0 2=0 3=1 4=0 5=1 6=1 7={m} 8={n} 9={k} 10=4")])
    return param, _weights(w) + _weights(b), rng.standard_normal((m, k)).astype(np.float32), "out", m * n


def kernel(s: Settings, name, shape, ops, param, weights, x, out_blob, out_elems) -> list[Record]:
    """ncnn fp32 on the same Vulkan device: wall clock of one extract (upload, layer, download),
    judged against the fp32 roofline."""
    gpu, why = gpu_index(s.device)
    if gpu is None:
        note(s, f"ncnn kernels skipped: {why}")
        return []
    net = NcnnNet(param, weights, out_blob, gpu)
    nbytes = x.nbytes + len(weights) + 4 * out_elems
    try:
        rec = wall_record(s, "kernels", name, shape, "fp32", "ncnn-vulkan", s.name, lambda: net(x), ops,
                          {"kernel": param.splitlines()[-1].split()[0], "includes": "upload + download"}, nbytes)
    finally:
        net.close()
    return [with_roofline(s, rec, ops, nbytes, "fp32_gflops")]


# -- a whole CNN: the model suite's peer ---------------------------------------------------
def to_ncnn(model, input_shape):
    """(param, weights, output blob) of a float CNN in ncnn's format, from its torch.fx trace:
    Conv2d (+ BatchNorm folded, + a sole ReLU/ReLU6 consumer fused), Linear, MaxPool2d,
    global average pooling, ReLU/ReLU6, residual add; Dropout, Identity and flatten after the
    global pooling (already flat in ncnn) vanish. A blob read twice gets a Split."""
    import operator

    import torch
    import torch.fx
    import torch.nn.functional as F
    from torch import nn
    gm = torch.fx.symbolic_trace(model)
    mods = dict(gm.named_modules())
    mod = lambda n: mods.get(n.target) if n.op == "call_module" else None   # noqa: E731
    layers, weights, blob, done = [], [], {}, set()

    def sole_activation(n):
        users = list(n.users)
        if len(users) == 1:
            m, u = mod(users[0]), users[0]
            if isinstance(m, nn.ReLU) or u.target in (F.relu, torch.relu):
                return u, RELU
            if isinstance(m, nn.ReLU6):
                return u, RELU6
        return None, ""

    c, h, w = input_shape
    with torch.no_grad():
        for n in gm.graph.nodes:
            if n in done or n.op == "output":
                continue
            m = mod(n)
            ins = [blob[a] for a in n.args if isinstance(a, torch.fx.Node)]
            last = n
            if n.op == "placeholder":
                blob[n] = "in0"
                layers.append(("Input", "in0", [], ["in0"], f"0={w} 1={h} 2={c}"))
                continue
            if isinstance(m, nn.Conv2d):
                wt = m.weight.double()
                b = m.bias.double() if m.bias is not None else torch.zeros(m.out_channels, dtype=torch.float64)
                users = list(n.users)
                if len(users) == 1 and isinstance(mod(users[0]), nn.BatchNorm2d):
                    bn = mod(users[0])
                    done.add(users[0])
                    last = users[0]
                    scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
                    wt, b = wt * scale[:, None, None, None], (b - bn.running_mean.double()) * scale + bn.bias.double()
                act_node, act = sole_activation(last)
                if act_node is not None:
                    done.add(act_node)
                    last = act_node
                if m.stride[0] != m.stride[1] or m.padding[0] != m.padding[1] or m.dilation != (1, 1):
                    raise NotImplementedError(f"to_ncnn: {n.target}: only square stride/padding, no dilation")
                layer, data = _conv(f"l{len(layers)}", ins[0], wt.float().numpy(), b.float().numpy(),
                                    m.stride[0], m.padding[0], m.groups, act)
                layers.append(layer)
                weights.append(data)
            elif isinstance(m, nn.Linear):
                name = f"l{len(layers)}"
                layers.append(("InnerProduct", name, ins, [name], f"0={m.out_features} 1={int(m.bias is not None)} "
                                                                  f"2={m.weight.numel()}"))
                weights.append(_weights(m.weight.float().numpy()))
                if m.bias is not None:
                    weights.append(_weights(m.bias.float().numpy(), tagged=False))
            elif isinstance(m, nn.MaxPool2d):
                name = f"l{len(layers)}"
                layers.append(("Pooling", name, ins, [name], f"0=0 1={m.kernel_size} 2={m.stride} 3={m.padding} 5=1"))
            elif isinstance(m, nn.AdaptiveAvgPool2d) or n.target is F.adaptive_avg_pool2d:
                name = f"l{len(layers)}"
                layers.append(("Pooling", name, ins, [name], "0=1 4=1"))
            elif isinstance(m, nn.ReLU) or n.target in (F.relu, torch.relu):
                name = f"l{len(layers)}"
                layers.append(("ReLU", name, ins, [name], ""))
            elif isinstance(m, nn.ReLU6):
                name = f"l{len(layers)}"
                layers.append(("Clip", name, ins, [name], "0=0.000000e+00 1=6.000000e+00"))
            elif isinstance(m, (nn.Dropout, nn.Identity, nn.Flatten)) or n.target is torch.flatten:
                blob[n] = ins[0]
                continue
            elif n.target in (operator.add, torch.add):
                name = f"l{len(layers)}"
                layers.append(("BinaryOp", name, ins, [name], "0=0"))
            else:
                raise NotImplementedError(f"to_ncnn: no ncnn layer for {n.op} {n.target}")
            blob[n] = blob[last] = layers[-1][1]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    out_blob = blob[out_node.args[0]]
    readers = {}
    for i, layer in enumerate(layers):
        for j, b in enumerate(layer[2]):
            readers.setdefault(b, []).append((i, j))
    final = []
    for layer in layers:
        final.append(layer)
        top = layer[3][0]
        if len(readers.get(top, ())) > 1:
            names = [f"{top}_{k}" for k in range(len(readers[top]))]
            final.append(("Split", f"{top}_split", [top], names, ""))
            for (i, j), nm in zip(readers[top], names):
                layers[i][2][j] = nm
    return _text(final), b"".join(weights), out_blob

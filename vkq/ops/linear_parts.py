"""linear_dynamic_parts: the linear_dynamic nodes that read one x (a decoder layer's q, k and v
projections) as one node, so that a batch-1 step computes them in one dispatch.

    x f32 (..., K), then per part: weight int8 (N_i, K), w_scale f32 (N_i,), bias f32 (N_i,)
    [, rms_norm's weight f32 (K,) last] -> one f32 (..., N_i) output per part;
    attrs parts (2 or 3) [, rms_norm {"eps"}]

Each output is bit for bit linear_dynamic's of its part (the reference computes it so): one row
quantization of x (its rms_norm, where fused) and each column's own integer sum and epilogue.
The build chooses the dispatches: on a CPU driver (the GEMV's lanes over columns, COLS) at most
one 4-row block of x runs as one linear_gemv COLS PARTS dispatch over the parts' columns one
after another, each output at its own binding; elsewhere (GPUs' split-K GEMV, a prefill's tiled
GEMM) it runs as the separate linear_dynamic dispatches it replaced, with one row quantization.
Measured (lavapipe, SmolLM2's decode step, 30 layers): q, k, v 8.4 -> 4.0 ms of GPU time, 60
dispatches fewer; gate and up (below) 10.5 -> 7.7 ms, 30 fewer.

linear_dynamic_glu: an MLP's gate and up projections (gate = silu(gate's linear), up = up's
linear * gate: the two linear_dynamic nodes with their fused epilogues) as one node:

    x f32 (..., K), weight, w_scale, bias of the gate, then of the up [, the rms_norm weight]
    -> gate f32 (..., N), up f32 (..., N); attrs [rms_norm {"eps"}]

one linear_gemv COLS GLU dispatch where the parts take one (at most 4 rows, a CPU driver), else
the two dispatches it replaced.

group_row_linears and pair_glu_linears are the program rewrites (vkq/rewrites.py) that form them."""
from __future__ import annotations

import numpy as np

from ..program import Node
from ..registry import register_op
from .linear import (EPILOGUES, GEMV_ROWS, LinearDynamic, _columns, _rows, _up4, _weight, cols_width, gemv_over_columns,
                     pack_weight, quantize_rows_dispatch, use_dot_product)

MAX_PARTS = 3      # output bindings of linear_gemv.comp PARTS


def _parts(node):
    """[(weight, w_scale, bias, output)] of each part, and the rms_norm weight or None."""
    n = int(node.attrs.get("parts", 0))
    ins = node.inputs[1:]
    norm = node.attrs.get("rms_norm") is not None
    if not 2 <= n <= MAX_PARTS or len(ins) != 3 * n + norm or len(node.outputs) != n:
        raise ValueError(f"{node.name}: linear_dynamic_parts takes x, then weight, w_scale and bias of each of "
                         f"its 2..{MAX_PARTS} parts (attr parts), [the rms_norm weight], and an output a part")
    return [(*ins[3 * i:3 * i + 3], node.outputs[i]) for i in range(n)], (ins[-1] if norm else None)


def _sub_node(node, i, part, norm):
    w, s, b, y = part
    attrs = {"rms_norm": node.attrs["rms_norm"]} if norm is not None else {}
    return Node("linear_dynamic", [node.inputs[0], w, s, b] + ([norm] if norm is not None else []), [y], attrs,
                name=f"{node.name}.{i}")


def _reference(x, *more, parts, rms_norm=None):
    ins, norm = list(more[:3 * parts]), list(more[3 * parts:])
    return tuple(LinearDynamic.reference(x, *ins[3 * i:3 * i + 3], *norm, rms_norm=rms_norm) for i in range(parts))


def _one_dispatch(ctx, x) -> bool:
    """Whether the parts run as one COLS dispatch: at most one 4-row block, a CPU driver."""
    return _up4(_rows(ctx.spec(x).shape)) <= GEMV_ROWS and gemv_over_columns(ctx.device.info)


def _cols_dispatch(ctx, node, sub, outs, mode, spec_tail, tiles_x):
    """linear_gemv COLS over the sub-nodes' weights one after another (each padded to whole
    column tiles) and their column constants, with its shared row quantization: [dispatches]."""
    x, info = node.inputs[0], ctx.device.info
    shape = ctx.spec(x).shape
    r, k = _rows(shape), shape[-1]
    ws = [_weight(ctx, s, k) for s in sub]
    attrs = node.attrs.get("rms_norm")
    norm = node.inputs[-1] if attrs is not None else None
    quant, q, rowq = quantize_rows_dispatch(ctx, x, r, k, (norm, float(attrs["eps"])) if norm else None)
    dot = use_dot_product(ctx.device, k)
    width = cols_width(info)
    tn, k4 = 4 * width, _up4(k) // 4
    packed = np.concatenate([pack_weight(w, tn, 1, dot) for w in ws])
    table = np.concatenate([_columns(w.shape[0], tn, [w.sum(axis=1, dtype=np.int64),
                                                      np.asarray(ctx.constant(s.inputs[2]), np.float32),
                                                      np.asarray(ctx.constant(s.inputs[3]), np.float32),
                                                      np.zeros(w.shape[0])])
                            for w, s in zip(ws, sub)])
    info.check_loop_budget(k4 + 32, f"{node.name}: linear_gemv over K = {k}")
    bufs = [q, ctx.const_buffer(packed), ctx.const_buffer(table), outs[0], rowq, rowq, *outs[1:]]
    tiles = tiles_x(tn, [w.shape[0] for w in ws])
    gemv = ctx.device.dispatch("linear_gemv", bufs, (tiles, _up4(r) // 4, 1), local=(width,),
                               spec=(min(r, 4), tn) + spec_tail(ws),
                               push=(_up4(r) // 4, r, k4, ws[0].shape[0], tiles, 0, 0, 0, np.float32(0), 0),
                               defines={"COLS": 1, "OUT_F32": 1, "ROW_QPARAMS": 1, mode: 1, **({"DOT": 1} if dot else {})})
    return [s for s in (quant, gemv) if s is not None]


def _build(ctx, node):
    parts, norm = _parts(node)
    sub = [_sub_node(node, i, part, norm) for i, part in enumerate(parts)]
    if not _one_dispatch(ctx, node.inputs[0]):
        return [st for s in sub for st in LinearDynamic.build(ctx, s)]
    outs = [ctx.buffer(p[3]) for p in parts]
    outs += outs[-1:] * (MAX_PARTS - len(outs))     # (an unused binding: part 2's columns are 0)
    ns = lambda ws: [w.shape[0] for w in ws] + [0]  # noqa: E731
    return _cols_dispatch(ctx, node, sub, outs, "PARTS", lambda ws: (EPILOGUES[None], ns(ws)[1], ns(ws)[2]),
                          lambda tn, n: sum(-(-v // tn) for v in n))


@register_op
class LinearDynamicParts:
    """float32 x (..., K), then (weight int8 (N_i, K), w_scale f32, bias f32) of each of 2-3
    parts [, the rms_norm weight] -> an f32 (..., N_i) per part; attrs parts [, rms_norm]: the
    linear_dynamic nodes that read one x, one row quantization, one dispatch where a GEMV's lanes
    own columns (the module docstring)."""
    name = "linear_dynamic_parts"
    shaders = ("linear_rowq", "linear_q8", "linear_gemv")
    reference = staticmethod(_reference)
    build = staticmethod(_build)


def _glu_sub_nodes(node):
    x, wg, sg, bg, wu, su, bu, *norm = node.inputs
    attrs = {"rms_norm": node.attrs["rms_norm"]} if node.attrs.get("rms_norm") is not None else {}
    if len(norm) != bool(attrs) or len(node.outputs) != 2:
        raise ValueError(f"{node.name}: linear_dynamic_glu takes x, the gate's and the up's weight, w_scale and "
                         "bias, [the rms_norm weight]; outputs gate and up")
    gate, up = node.outputs
    return (Node("linear_dynamic", [x, wg, sg, bg, *norm], [gate], {**attrs, "epilogue": "silu"}, name=f"{node.name}.gate"),
            Node("linear_dynamic", [x, wu, su, bu, gate, *norm], [up], {**attrs, "epilogue": "mul"}, name=f"{node.name}.up"))


def _glu_reference(x, wg, sg, bg, wu, su, bu, *norm, rms_norm=None):
    gate = LinearDynamic.reference(x, wg, sg, bg, *norm, epilogue="silu", rms_norm=rms_norm)
    return gate, LinearDynamic.reference(x, wu, su, bu, gate, *norm, epilogue="mul", rms_norm=rms_norm)


def _glu_build(ctx, node):
    sub = _glu_sub_nodes(node)
    if not _one_dispatch(ctx, node.inputs[0]):
        return [st for s in sub for st in LinearDynamic.build(ctx, s)]
    ws = [_weight(ctx, s, ctx.spec(node.inputs[0]).shape[-1]) for s in sub]
    if ws[0].shape != ws[1].shape:
        raise ValueError(f"{node.name}: the gate's weight {ws[0].shape} and the up's {ws[1].shape} differ")
    gate, up = (ctx.buffer(t) for t in node.outputs)
    return _cols_dispatch(ctx, node, sub, [up, gate], "GLU", lambda ws: (EPILOGUES[None],),
                          lambda tn, n: -(-n[0] // tn))


@register_op
class LinearDynamicGlu:
    """float32 x (..., K), the gate's then the up's (weight int8 (N, K), w_scale f32 (N,), bias
    f32 (N,)) [, the rms_norm weight] -> gate = silu(x W_g^T ...), up = (x W_u^T ...) * gate, f32
    (..., N) each: an MLP's two linear_dynamic nodes with their epilogues, one dispatch where a
    GEMV's lanes own columns (the module docstring)."""
    name = "linear_dynamic_glu"
    shaders = ("linear_rowq", "linear_q8", "linear_gemv")
    reference = staticmethod(_glu_reference)
    build = staticmethod(_glu_build)


def pair_glu_linears(program, keep=frozenset()) -> int:
    """A linear_dynamic with the epilogue silu (an MLP's gate) and a later one with the epilogue
    mul by that gate's output (its up), reading the same x with the same rms_norm -> one
    linear_dynamic_glu node in the gate's place (the up reads nothing made between them but the
    gate), where the up is not kept. Returns the pairs formed."""
    gates, replace, gone = {}, {}, set()
    for node in program.nodes:
        if node.op != "linear_dynamic" or set(node.attrs) - {"rms_norm", "epilogue"}:
            continue
        norm = node.attrs.get("rms_norm")
        epi = node.attrs.get("epilogue")
        if epi == "silu" and len(node.inputs) == 4 + (norm is not None):
            gates[node.outputs[0]] = node
        elif epi == "mul" and len(node.inputs) == 5 + (norm is not None) and node.name not in keep:
            gate = gates.pop(node.inputs[4], None)
            if gate is None or gate.inputs[0] != node.inputs[0] or repr(gate.attrs.get("rms_norm")) != repr(norm) \
                    or gate.inputs[4:] != node.inputs[5:] or gate.name in replace \
                    or not _consts(program, node.inputs[1:4] + node.inputs[5:]):
                continue
            attrs = {"rms_norm": dict(norm)} if norm is not None else {}
            replace[gate.name] = Node("linear_dynamic_glu", gate.inputs[:4] + node.inputs[1:4] + gate.inputs[4:],
                                      [gate.outputs[0], node.outputs[0]], attrs, name=gate.name)
            gone.add(node.name)
    program.nodes = [replace.get(n.name, n) for n in program.nodes if n.name not in gone]
    return len(replace)


def _consts(program, names) -> bool:
    """Whether these inputs are constants (a merged node computes a later node's linear earlier:
    nothing it reads but x and the gate may be made in between)."""
    return all(t in program.constants for t in names)


def _key(node):
    if node.op != "linear_dynamic" or node.attrs.get("epilogue") or set(node.attrs) - {"rms_norm"}:
        return None
    norm = node.attrs.get("rms_norm")
    if norm is not None and len(node.inputs) != 5 or norm is None and len(node.inputs) != 4:
        return None
    return (node.inputs[0], node.inputs[4] if norm is not None else None, repr(norm))


def group_row_linears(program, keep=frozenset()) -> int:
    """linear_dynamic nodes without an epilogue that read one x with one rms_norm (a layer's q, k,
    v) -> one linear_dynamic_parts node, up to MAX_PARTS, in the first one's place (the others
    read only x and constants, so nothing they read comes later). Returns the nodes formed."""
    groups, order = {}, []
    for node in program.nodes:
        key = _key(node)
        if key is None or not _consts(program, node.inputs[1:]):
            continue
        members = groups.setdefault(key, [])
        if not members or len(members[-1]) == MAX_PARTS or node.name in keep:   # (a kept node may only
            members.append([node])                                              # lead: it keeps its name)
            order.append((key, len(members) - 1))
        else:
            members[-1].append(node)
    formed, replace, gone = 0, {}, set()
    for key, idx in order:
        nodes = groups[key][idx]
        if len(nodes) < 2:
            continue
        first = nodes[0]
        norm = first.attrs.get("rms_norm")
        ins = [first.inputs[0]] + [t for n in nodes for t in n.inputs[1:4]] + ([first.inputs[4]] if norm else [])
        attrs = {"parts": len(nodes), **({"rms_norm": dict(norm)} if norm is not None else {})}
        replace[first.name] = Node("linear_dynamic_parts", ins, [n.outputs[0] for n in nodes], attrs,
                                   name=first.name)
        gone.update(n.name for n in nodes[1:])
        formed += 1
    program.nodes = [replace.get(n.name, n) for n in program.nodes if n.name not in gone]
    return formed

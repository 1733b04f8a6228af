"""Program rewrites for attention, run by the lowering (vkq.rewrites) after translation; each
turns a chain of float ops into one op whose reference computes the same values:
  fold_views_into_matmul         head split / K transpose / head merge copies -> matmul_strided
  fold_scale_mask_into_softmax   softmax(mul(scores, s) + mask) -> softmax_masked
  fold_fake_quantize             fake_quantize(y) -> y's kernel with its fake-quantize epilogue
  fold_broadcast_expands         expand(x) read by broadcasting binary ops -> x
"""
from __future__ import annotations

import numpy as np

from .float import BINARY, _numel, broadcast_strides, permute_dims
from .float_matmul import _contiguous_view


VIEW_OPS = ("reshape", "transpose", "permute")


def reshape_view(shape, strides, new_shape):
    """Strides that read a strided view (shape, strides) reshaped row-major to new_shape
    without copying, or None where none exist (numpy's no-copy reshape rule: the old dims
    merged into each new dim must be contiguous among themselves)."""
    shape, new_shape = [int(d) for d in shape], [int(d) for d in new_shape]
    if _numel(shape) != _numel(new_shape) or 0 in shape:
        return None
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    out, i, j = [0] * len(new_shape), 0, 0
    while i < len(new_shape):
        if new_shape[i] == 1:
            i += 1
            continue
        # take new dims i.. and old dims j.. until their sizes agree
        ni, nsize, oj, osize = i, new_shape[i], j, old[j][0]
        while nsize != osize:
            if nsize < osize:
                ni += 1
                nsize *= new_shape[ni]
            else:
                oj += 1
                osize *= old[oj][0]
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(j, oj)):
            return None
        stride = old[oj][1]
        for k in range(ni, i - 1, -1):
            out[k] = stride
            stride *= new_shape[k]
        i, j = ni + 1, oj + 1
    return out


def _through(view, node, in_shape):
    """The view after one copy node, reading forward (None: a reshape that needs a copy)."""
    shape, strides = view
    if node.op == "reshape":
        st = reshape_view(shape, strides, node.attrs["shape"])
        return None if st is None else [list(node.attrs["shape"]), st]
    dims = permute_dims(node.op, node.attrs, len(shape))
    return [[shape[d] for d in dims], [strides[d] for d in dims]]


def _back(view, node, in_shape):
    """The view of a copy node's input inside the buffer its output's view describes."""
    shape, strides = view
    if node.op == "reshape":
        st = reshape_view(shape, strides, in_shape)
        return None if st is None else [list(in_shape), st]
    dims = permute_dims(node.op, node.attrs, len(in_shape))
    back = [0] * len(dims)
    for i, d in enumerate(dims):
        back[d] = strides[i]
    return [list(in_shape), back]


def readers_of(program) -> dict:
    """tensor -> the nodes that read it, in program order."""
    readers: dict = {}
    for n in program.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    return readers


def split_view(t, step, forward, start):
    """(base, view, chain): walking up from tensor t through the ops that made it (step(cur) ->
    (op, its input) or None), the farthest tensor `base` whose values t can be read from as a
    strided view (start(base), then forward(view, op) down the chain: None where a copy is
    needed). A head split read in place. With no such ops: (t, start(t), [])."""
    chain, tensors = [], [t]
    while (up := step(tensors[-1])) is not None:
        chain.append(up[0])
        tensors.append(up[1])
    for cut in range(len(chain), 0, -1):
        view = start(tensors[cut])
        for item in reversed(chain[:cut]):
            view = forward(view, item) if view is not None else None
        if view is not None:
            return tensors[cut], view, chain[:cut]
    return t, start(t), []


def merge_view(start, readers, private, is_view, shape):
    """(last, chain, view): the copies after tensor `start` (each the only reader of the one
    before it, is_view), the tensor the longest foldable run of them ends in, and [shape,
    strides] of start's values inside that tensor (read back from its contiguous layout): a
    head merge written in place. With no copies: (start, [], contiguous)."""
    chain, cur = [], start
    while private(cur) and is_view(readers[cur][0]):
        chain.append(readers[cur][0])
        cur = readers[cur][0].outputs[0]
    for cut in range(len(chain), 0, -1):
        last = chain[cut - 1].outputs[0]
        view = _contiguous_view(shape(last))
        for c in reversed(chain[:cut]):
            view = _back(view, c, shape(c.inputs[0])) if view is not None else None
        if view is not None:
            return last, chain[:cut], view
    return start, [], _contiguous_view(shape(start))


def fold_views_into_matmul(program, keep=frozenset()) -> int:
    """Replace matmul(reshape/permute copies of a, ... of b) -> reshape/permute copies by one
    matmul_strided that reads a and b and writes the last tensor in place, when every tensor in
    between has no other reader: a transformer's head split (view + transpose), K's transpose
    and the head merge (transpose + reshape) cost no dispatches. Returns the matmuls folded."""
    producer = {t: n for n in program.nodes for t in n.outputs}
    readers = readers_of(program)
    shape = lambda t: list(program.tensors[t].shape)
    private = lambda t: len(readers.get(t, [])) == 1 and t not in program.outputs
    is_view = lambda n: n is not None and n.op in VIEW_OPS and n.name not in gone and n.name not in keep
    gone, folded = set(), 0

    for idx, node in enumerate(program.nodes):
        if node.op not in ("matmul", "bmm") or any(len(shape(t)) < 2 for t in node.inputs + node.outputs):
            continue
        ins = []
        for t in node.inputs:   # up from each operand: its copies, nearest first
            step = lambda cur: (producer[cur], producer[cur].inputs[0]) \
                if private(cur) and is_view(producer.get(cur)) else None
            ins.append(split_view(t, step, lambda v, c: _through(v, c, None),
                                  lambda b: _contiguous_view(shape(b))))
        last, out_chain, view = merge_view(node.outputs[0], readers, private, is_view, shape)
        if not (ins[0][2] or ins[1][2] or out_chain):
            continue
        (a, a_view, a_chain), (b, b_view, b_chain) = ins
        attrs = {"a_view": a_view, "b_view": b_view, "out_strides": view[1], "out_shape": shape(last)}
        program.nodes[idx] = type(node)("matmul_strided", [a, b], [last], attrs, name=node.name)
        for c in a_chain + b_chain + out_chain:
            gone.add(c.name)
            for t in (c.outputs if c in a_chain + b_chain else c.inputs):
                program.tensors.pop(t, None)
        folded += 1
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return folded


def _broadcasts(shape, to) -> bool:
    try:
        broadcast_strides(shape, to)
        return True
    except ValueError:
        return False


def fold_scale_mask_into_softmax(program, keep=frozenset()) -> int:
    """softmax(mul(x, scalar) + mask) along the last dim -> softmax_masked(x, mask; scale) when
    the intermediates have no other reader: attention's scale and padding mask cost no passes
    over the scores. The references agree bit for bit. Returns the softmaxes folded."""
    producer = {t: n for n in program.nodes for t in n.outputs}
    readers = readers_of(program)
    shape = lambda t: tuple(program.tensors[t].shape)
    private = lambda t: len(readers.get(t, [])) == 1 and t not in program.outputs
    gone, folded = set(), 0
    for idx, node in enumerate(program.nodes):
        t = node.inputs[0] if node.op == "softmax" else None
        add = producer.get(t) if t is not None else None
        if (add is None or not private(t) or add.op != "add" or add.name in keep or len(add.inputs) != 2
                or add.attrs.get("alpha", 1) != 1
                or node.attrs.get("dim", -1) % len(shape(t)) != len(shape(t)) - 1):
            continue
        pair = [(x, m) for x, m in (add.inputs, add.inputs[::-1]) if shape(x) == shape(t) and _broadcasts(shape(m), shape(t))]
        if not pair:
            continue
        src, mask = pair[0]
        scale, mul = 1.0, producer.get(src)
        if private(src) and mul is not None and mul.op == "mul" and mul.name not in keep and len(mul.inputs) == 1:
            scale, src = float(mul.attrs["scalar"]), mul.inputs[0]
            gone.add(mul.name)
            program.tensors.pop(mul.outputs[0], None)
        gone.add(add.name)
        program.tensors.pop(t, None)
        program.nodes[idx] = type(node)("softmax_masked", [src, mask], list(node.outputs), {"scale": scale},
                                        name=node.name)
        folded += 1
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return folded


FQ_EPILOGUE = frozenset(BINARY) | {"matmul", "bmm", "matmul_strided"}   # kernels with the FQ epilogue


def fold_fake_quantize(program, keep=frozenset()) -> int:
    """fake_quantize(y) -> y's op with attr fq, where y is a float32 result of an op in
    FQ_EPILOGUE that nothing else reads: its kernel quantizes and dequantizes each value before
    storing it (fake_quant.glsl, as the fake_quantize shader does: the same bits), one dispatch
    and one pass over the values fewer. A static attention's scores (Swin: matmul -> fq -> bias
    add -> fq [-> mask add -> fq] -> softmax) keep only their matmul and adds. Runs after
    fold_scale_mask_into_softmax, which folds only adds without one. Returns the pairs folded."""
    producer = {t: (i, n) for i, n in enumerate(program.nodes) for t in n.outputs}
    readers = readers_of(program)
    gone = set()
    for node in program.nodes:
        t = node.inputs[0] if node.op == "fake_quantize" and node.name not in keep else None
        idx, src = producer.get(t, (None, None))
        if (src is None or src.op not in FQ_EPILOGUE or src.attrs.get("fq") or len(readers.get(t, [])) != 1
                or t in program.outputs or program.tensors[t].dtype != "float32"
                or program.tensors[node.outputs[0]].shape != program.tensors[t].shape):
            continue
        fq = {k: node.attrs[k] for k in ("scale", "zero_point", "qmin", "qmax") if k in node.attrs}
        program.nodes[idx] = type(src)(src.op, list(src.inputs), list(node.outputs), {**src.attrs, "fq": fq},
                                       name=src.name)
        program.tensors.pop(t, None)
        gone.add(node.name)
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return len(gone)


def fold_broadcast_expands(program, keep=frozenset()) -> int:
    """expand(x) read only by float elementwise binary ops -> they read x (their kernel
    broadcasts it: a stride of 0), where the op's output shape stays the same. F.normalize's
    x / norm.expand_as(x) (Swin-V2's cosine attention: 24 of them, (64, 3, 64, 32) floats
    written and read back, 1.5 ms each on lavapipe) becomes one broadcasting division. Returns
    the expands folded."""
    readers = readers_of(program)
    T, rename = program.tensors, {}          # an expand's output -> its input, as readers will read

    def takes(r, t, src):
        if r.op not in BINARY or len(r.inputs) != 2:      # (a reader stays, reading the input instead)
            return False
        if any(T[u].dtype != "float32" for u in r.inputs + r.outputs):
            return False
        shapes = [T[src if u == t else rename.get(u, u)].shape for u in r.inputs]   # (both may be folds)
        try:
            return tuple(np.broadcast_shapes(*shapes)) == tuple(T[r.outputs[0]].shape)
        except ValueError:
            return False
    gone = set()
    for node in program.nodes:
        t = node.outputs[0]
        if node.op != "expand" or node.name in keep or t in program.outputs or T[t].dtype != "float32":
            continue
        users = readers.get(t, [])
        if users and all(takes(r, t, node.inputs[0]) for r in users):
            rename[t] = node.inputs[0]
            gone.add(node.name)
    program.nodes = [n if not set(n.inputs) & rename.keys() else
                     type(n)(n.op, [rename.get(u, u) for u in n.inputs], list(n.outputs), dict(n.attrs), name=n.name)
                     for n in program.nodes if n.name not in gone]
    for t in rename:
        T.pop(t, None)
    return len(gone)



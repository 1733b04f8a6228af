"""attention_cached: attention of new queries over a static KV cache, in float32 on Vulkan.

    q f32 (B, H, T, D), k_cache f32 (B, Hkv, N, D), v_cache f32 (B, Hkv, N, Dv), positions int32 (T,)
    -> out f32 (B, H, T, Dv);  attrs scale, window (0: none), softcap (0.0: none),
    out_tokens_first (out written (B, T, H, Dv): the head merge's transpose, fold_head_transposes)

For each b, h, t: p = positions[t] (the caches already hold query t's own key and value at row
p), kh = h // (H // Hkv) (grouped-query heads: the cache head is indexed, not repeated), keys
j = lo .. p with lo = max(0, p - window + 1) if window else 0 (a sliding window);
s_j = dot(q[b,h,t], k_cache[b,kh,j]) * scale, then softcap * tanh(s_j / softcap) if softcap;
out[b,h,t] = sum_j softmax(s)_j v_cache[b,kh,j]. Rows of the cache past p are never read (a
static cache past its filled prefix may hold anything). A position outside [0, N) is an error
of the reference (the shader clamps it, so it never reads out of bounds).

One dispatch of shaders/attention_cached.comp: the keys of a query dealt into SPLIT partitions,
each an online softmax, merged by a fixed tree (the shader's header says how), run by COOP lanes
a query, QW queries a workgroup (`lanes_for`: a workgroup a query and a lane a partition on a
GPU; on CPU drivers a subgroup's worth of lanes a query in a decode step, a lane a query in a
prefill). The work follows the filled prefix: the loops run to positions[t] read from the
buffer, so a decode step at position 20 of an 8192-row cache reads 21 rows. The order of every
float sum is set by SPLIT alone, not by COOP or QW, the subgroup size or the device: the same
query gives the same bits in a prefill and in a decode step, at any workgroup shape.

The reference is the shader's float32 computation, operation by operation in its order (exp_f32,
ftz and recip_newton of float_exact.glsl, tanh_f32 of float_math.glsl; softcap's s / c as s times
the host's f32(1 / c): no division), so the device gives its bits (tests/test_attention_cached.py,
softcaps too); tests compare it with a float64 attention within the bound of that order.
"""
from __future__ import annotations

import numpy as np

from ..device import grid_1d
from ..registry import register_op

F32 = np.float32
SPLIT = 64                # key partitions: their number (and the tree over them) sets the order of every sum
SHARED_BYTES = 16384      # the lanes' value vectors in shared memory, at most
MANY_QUERIES = 32         # from this many queries a node (B H T) CPU drivers give each a lane of its own
LANES = None              # tests: force (COOP, QW), lanes a query and queries a workgroup
MAX_HEAD_DIM = 512        # D and Dv a lane keeps in registers (vec4 arrays), at most


def _positions(positions, n: int) -> np.ndarray:
    pos = np.asarray(positions).reshape(-1)
    if pos.dtype.kind not in "iu":
        raise ValueError(f"attention_cached: positions must be integers, got {pos.dtype}")
    bad = np.flatnonzero((pos < 0) | (pos >= n))
    if bad.size:
        raise ValueError(f"attention_cached: positions[{int(bad[0])}] = {int(pos[bad[0]])} is outside "
                         f"the cache's rows [0, {n})")
    return pos.astype(np.int64)


def _shapes(q_shape, k_shape, v_shape, pos_shape):
    """(B, H, T, D, Hkv, N, Dv), or ValueError saying what does not fit."""
    if len(q_shape) != 4 or len(k_shape) != 4 or len(v_shape) != 4:
        raise ValueError(f"attention_cached: q, k_cache, v_cache must be 4-D, got {q_shape}, {k_shape}, {v_shape}")
    B, H, T, D = q_shape
    Bk, Hkv, N, Dk = k_shape
    if (Bk, Dk) != (B, D) or tuple(v_shape[:3]) != (B, Hkv, N):
        raise ValueError(f"attention_cached: q {q_shape}, k_cache {k_shape}, v_cache {v_shape} do not fit "
                         "(B, H, T, D), (B, Hkv, N, D), (B, Hkv, N, Dv)")
    if Hkv < 1 or H % Hkv:
        raise ValueError(f"attention_cached: {H} query heads are not a multiple of {Hkv} cache heads")
    if tuple(pos_shape) != (T,):
        raise ValueError(f"attention_cached: positions {tuple(pos_shape)} must be ({T},), a position per query")
    return B, H, T, D, Hkv, N, v_shape[3]


def _shapes_q8(q_shape, k_shape, v_shape, pos_shape, dv):
    """_shapes of int8 caches, rows of kv_quantize's words: (B, Hkv, N, ceil(D/4) + 1) keys and
    (B, Hkv, N, ceil(dv/4) + 1) values."""
    from .kv_q8 import row_words
    if len(q_shape) != 4 or len(k_shape) != 4 or len(v_shape) != 4 or int(dv) < 1:
        raise ValueError(f"attention_cached_q8: q, k_cache, v_cache must be 4-D and dv >= 1, got {q_shape}, "
                         f"{k_shape}, {v_shape}, dv {dv}")
    if k_shape[3] != row_words(q_shape[3]) or v_shape[3] != row_words(dv):
        raise ValueError(f"attention_cached_q8: caches of rows of {k_shape[3]} and {v_shape[3]} words do not hold "
                         f"{q_shape[3]} and {dv} int8 values and a scale (ceil(D/4) + 1 words)")
    return _shapes(q_shape, (*k_shape[:3], q_shape[3]), (*v_shape[:3], int(dv)), pos_shape)


def attention_cached(q, k_cache, v_cache, positions, *, scale, window=0, softcap=0.0, out_tokens_first=False):
    """The specification: shaders/attention_cached.comp's float32 operations in its order, so
    that the device gives these bits. Per query, keys lo..p dealt into SPLIT partitions
    (partition r: j = lo + r, lo + r + SPLIT, ...), each an online softmax in j order (a new max
    rescales what it holds by exp_f32(m_old - m)), the partitions merged by the halving tree
    (r with r + half, half = SPLIT/2 .. 1), out = a * recip_newton(s). The dot product: 4 partial
    sums over d % 4 in d order, then (c0 + c1) + (c2 + c3), times scale. exp is exp_f32 (every
    weight and factor flushed where subnormal, as a device may flush it), softcap's tanh the
    shaders' tanh_f32. scale and softcap as float32 push constants take them."""
    q, k, v = (np.asarray(a, F32) for a in (q, k_cache, v_cache))
    _, _, _, _, _, _, dv = _shapes(q.shape, k.shape, v.shape, np.shape(positions))
    return _attend(q, k, v, None, None, positions, dv, scale, window, softcap, out_tokens_first)


def attention_cached_q8(q, k_cache, v_cache, positions, *, scale, window=0, softcap=0.0, dv,
                        out_tokens_first=False):
    """attention_cached over int8 caches: rows of kv_quantize's words (vkq/ops/kv_q8.py), the
    int8 values of key / value row j, qk_j and qv_j, with their scales ks_j and vs_j. The order
    is attention_cached's with each scale taken out of its row's sums (a multiply a row, not a
    multiply a value):
        s_j = ftz(ftz(dot(q, f32(qk_j)) * ks_j) * scale)    (dot: attention_cached's 4 partial sums)
        the value row's weight e_j (exp_f32, as attention_cached's) is ftz(e_j * vs_j) in the
        exp-weighted sum: a += ftz(e_j * vs_j) * f32(qv_j); the sum s of the weights is of e_j.
    Everything else (partitions, rescales, tree, softcap, 1/s) as attention_cached."""
    from .kv_q8 import dequantize_rows
    q = np.asarray(q, F32)
    k, v = np.asarray(k_cache), np.asarray(v_cache)
    _shapes_q8(q.shape, k.shape, v.shape, np.shape(positions), dv)
    kq, ks = dequantize_rows(k, q.shape[3])
    vq, vs = dequantize_rows(v, dv)
    return _attend(q, kq, vq, ks, vs, positions, int(dv), scale, window, softcap, out_tokens_first)


def _attend(q, k, v, ks, vs, positions, Dv, scale, window, softcap, out_tokens_first=False):
    """attention_cached's computation; k, v (B, Hkv, N, D | Dv or padded to 4s) float32, ks, vs
    (B, Hkv, N) the int8 rows' scales or None (float caches)."""
    from .float_math import exp_f32, ftz, recip_newton, tanh_f32
    B, H, T, D = q.shape
    Hkv, N = k.shape[1], k.shape[2]
    if int(window) < 0 or float(softcap) < 0:
        raise ValueError(f"attention_cached: window {window} and softcap {softcap} must be >= 0")
    pos = _positions(positions, N)
    scale, cap = F32(scale), F32(softcap)
    d4, dv4 = -(-D // 4), -(-Dv // 4)
    pad = lambda a, d, n4: np.concatenate([a, np.zeros(a.shape[:-1] + (n4 * 4 - d,), F32)], -1) if n4 * 4 > d else a
    qp = pad(q, D, d4).reshape(B * H, T, d4, 4)
    kp, vp = pad(k, k.shape[-1], d4), pad(v, v.shape[-1], dv4)
    bh = np.arange(B * H)
    kh = (bh % H) // (H // Hkv) + (bh // H) * Hkv               # each (b, h)'s cache head, flattened with b
    kf = kp.reshape(B * Hkv, N, d4, 4)[kh]                      # (BH, N, d4, 4): heads indexed once
    vf = vp.reshape(B * Hkv, N, dv4 * 4)[kh]
    ksf = None if ks is None else np.asarray(ks, F32).reshape(B * Hkv, N)[kh]       # (BH, N)
    vsf = None if vs is None else np.asarray(vs, F32).reshape(B * Hkv, N)[kh]
    lo = np.maximum(0, pos - int(window) + 1) if window else np.zeros_like(pos)
    r = np.arange(SPLIT)
    m = np.full((B * H, T, SPLIT), -np.inf, F32)
    s = np.zeros((B * H, T, SPLIT), F32)
    a = np.zeros((B * H, T, SPLIT, dv4 * 4), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for it in range(int(-(-(pos - lo + 1).max() // SPLIT)) if T else 0):
            j = lo[:, None] + r[None, :] + SPLIT * it             # (T, SPLIT): partition r's it-th key
            ok = j <= pos[:, None]
            jj = np.where(ok, j, lo[:, None])
            kr = kf[:, jj]                                      # (BH, T, SPLIT, d4, 4)
            acc = np.zeros((B * H, T, SPLIT, 4), F32)
            for c in range(d4):
                acc = acc + qp[:, :, None, c, :] * kr[..., c, :]
            sc = (acc[..., 0] + acc[..., 1]) + (acc[..., 2] + acc[..., 3])
            sc = sc * scale if ksf is None else ftz(ftz(sc * ksf[:, jj]) * scale)
            if cap:
                sc = ftz(cap * tanh_f32(ftz(sc * F32(1 / float(cap)))))
            new = ok[None] & (sc > m)
            f = ftz(exp_f32(m - sc))
            s = np.where(new, s * f, s)
            a = np.where(new[..., None], a * f[..., None], a)
            m = np.where(new, sc, m)
            e = ftz(exp_f32(sc - m))
            s = np.where(ok[None], s + e, s)
            w = e if vsf is None else ftz(e * vsf[:, jj])
            a = np.where(ok[None, ..., None], a + w[..., None] * vf[:, jj], a)
        half = SPLIT // 2
        while half:
            m1, m2 = m[..., :half], m[..., half:2 * half]
            mx = np.maximum(m1, m2)
            f1 = np.where(m1 == mx, F32(1), ftz(exp_f32(m1 - mx)))
            f2 = np.where(m2 == mx, F32(1), ftz(exp_f32(m2 - mx)))
            s = s[..., :half] * f1 + s[..., half:2 * half] * f2
            a = a[..., :half, :] * f1[..., None] + a[..., half:2 * half, :] * f2[..., None]
            m = mx
            half //= 2
        out = a[..., 0, :] * recip_newton(s[..., 0])[..., None]
    out = out[..., :Dv].reshape(B, H, T, Dv)
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3)) if out_tokens_first else out


def loop_iterations(keys: int, dv: int, coop: int) -> int:
    """The loop iterations one invocation runs at most (llvmpipe's loop budget), with COOP lanes
    a query: per partition of its own its keys (the loops over D and Dv inside are unrolled: they
    are [[unroll]] with trip counts the specialization fixes; tests/test_attention_cached.py
    checks it on llvmpipe) and its carries, then the tree over the lanes and the stores."""
    own = SPLIT // coop
    return own * (-(-keys // SPLIT) + 3) + coop.bit_length() + -(-dv // coop) + 8


def lanes_for(info, queries: int, keys: int, dv: int) -> tuple[int, int]:
    """(COOP, QW): lanes a query and queries a workgroup. They do not change the bits. On a GPU
    a lane a partition, a workgroup a query (at most what keeps the lanes' vectors in
    SHARED_BYTES). On a CPU driver a workgroup runs on one thread and its lanes are SIMD lanes:
    more of them are more SIMD groups taking turns at each barrier, and a tree through shared
    memory costs more than the keys of a short prefix. So: at least MANY_QUERIES queries (a
    prefill) a lane a query, a subgroup's worth a workgroup; fewer (decode) a subgroup's worth
    of lanes a query, widened until an invocation's loops take at most half the loop budget."""
    widest = SPLIT
    while widest > 1 and widest * 16 * (-(-dv // 4)) > SHARED_BYTES:
        widest //= 2
    widest = min(widest, int(info.max_workgroup_invocations), int(info.max_workgroup_size[0]))
    if info.type != "cpu":
        return widest, 1
    sg, limit = 1, info.loop_budget
    while sg < max(4, int(info.subgroup_size)):
        sg *= 2
    sg = min(sg, int(info.max_workgroup_invocations))
    if queries >= MANY_QUERIES and (limit is None or loop_iterations(keys, dv, 1) <= limit // 2):
        return 1, sg
    coop = min(sg, widest)
    while limit is not None and coop < widest and loop_iterations(keys, dv, coop) > limit // 2:
        coop *= 2
    return coop, 1


def _decline(node, tensors):
    q8 = node.op == "attention_cached_q8"
    q, k, v, pos = (tensors[t] for t in node.inputs[:4])
    out = tensors[node.outputs[0]]
    kinds = [s.dtype for s in (q, k, v, out)]
    want = ["float32", "int32", "int32", "float32"] if q8 else ["float32"] * 4
    if kinds != want or pos.dtype != "int32":
        return (f"{node.op}: takes {', '.join(want)} q, k_cache, v_cache, out and int32 positions, got "
                f"{kinds + [pos.dtype]}")
    try:
        B, H, T, D, Hkv, N, Dv = (_shapes_q8(q.shape, k.shape, v.shape, pos.shape, node.attrs.get("dv", 0)) if q8
                                  else _shapes(q.shape, k.shape, v.shape, pos.shape))
    except ValueError as e:
        return str(e)
    if max(D, Dv) > MAX_HEAD_DIM or min(D, Dv, N, T, B) < 1:
        return f"{node.op}: head dims {D}, {Dv} (at most {MAX_HEAD_DIM}), N {N}, T {T}, B {B} (at least 1)"
    want = (B, T, H, Dv) if node.attrs.get("out_tokens_first") else (B, H, T, Dv)
    if tuple(out.shape) != want:
        return f"{node.op}: out {out.shape} is not {want}"
    if int(node.attrs.get("window", 0)) < 0 or float(node.attrs.get("softcap", 0.0)) < 0:
        return f"{node.op}: a negative window or softcap"
    return None


def _build(ctx, node):
    q8 = node.op == "attention_cached_q8"
    q, k, v, pos = node.inputs[:4]
    out = node.outputs[0]
    shapes = (ctx.spec(q).shape, ctx.spec(k).shape, ctx.spec(v).shape, ctx.spec(pos).shape)
    B, H, T, D, Hkv, N, Dv = _shapes_q8(*shapes, node.attrs["dv"]) if q8 else _shapes(*shapes)
    window, softcap = int(node.attrs.get("window", 0)), float(node.attrs.get("softcap", 0.0))
    keys = min(N, window) if window else N
    coop, qw = LANES or lanes_for(ctx.device.info, B * H * T, keys, Dv)
    ctx.device.info.check_loop_budget(loop_iterations(keys, Dv, coop), f"{node.name}: {node.op}")
    push = (B, H, T, N, Hkv, window, F32(node.attrs["scale"]), F32(softcap), int(bool(node.attrs.get("out_tokens_first"))),
            F32(1 / float(F32(softcap))) if softcap else F32(0))
    bufs = [ctx.buffer(t) for t in (q, k, v, pos, out)]
    return [ctx.device.dispatch("attention_cached", bufs, grid_1d(B * H * T, qw), local=(coop * qw,),
                                spec=(coop, D, Dv, SPLIT, (SPLIT // coop).bit_length(), qw),
                                push=push, defines=["Q8"] if q8 else None)]


@register_op
class AttentionCached:
    """Float attention of T new queries over the filled prefix of a static KV cache (grouped heads,
    sliding window, softcap)."""
    name = "attention_cached"
    shaders = ("attention_cached",)
    reference = staticmethod(attention_cached)
    build = staticmethod(_build)
    decline = staticmethod(_decline)


@register_op
class AttentionCachedQ8:
    """attention_cached over an int8 KV cache: rows of int8 values and a float32 scale
    (kv_quantize's), dequantized in the kernel."""
    name = "attention_cached_q8"
    shaders = ("attention_cached",)
    reference = staticmethod(attention_cached_q8)
    build = staticmethod(_build)
    decline = staticmethod(_decline)


def _head_swap(node, program) -> bool:
    """Whether node is a transpose (or permute) of dims 1 and 2 of a 4-D float32 tensor: a
    decoder's head split (B, T, H, D) -> (B, H, T, D), or the merge back."""
    if node is None or len(node.inputs) != 1 or program.tensors[node.inputs[0]].dtype != "float32" \
            or len(program.tensors[node.inputs[0]].shape) != 4:
        return False
    if node.op == "transpose":
        return sorted((node.attrs["dim0"] % 4, node.attrs["dim1"] % 4)) == [1, 2]
    return node.op == "permute" and [d % 4 for d in node.attrs["dims"]] == [0, 2, 1, 3]


def fold_head_transposes(program, keep=frozenset()) -> int:
    """The copies around a cached decoder's attention (vkq.lm_compile) read or written through:
    q's and k's head split into rotary (tokens_first: it reads (B, T, H, D)), v's into the
    scatter that writes the cache (src_transpose; in place index_copy_rows reads (B, T, Hkv, D)),
    the head merge after attention_cached (out_tokens_first: it writes (B, T, H, Dv), which the
    reshape before o_proj then aliases). Each is a float32 transpose of dims 1 and 2 with its
    op as its only reader: four dispatches a decoder layer fewer, the same values. Returns the
    transposes folded."""
    from .float_rewrites import readers_of
    producer = {t: n for n in program.nodes for t in n.outputs}
    readers = readers_of(program)
    private = lambda t: len(readers.get(t, [])) == 1 and t not in program.outputs
    gone = set()

    def split(t):
        """The head split that made t, where it can be folded into t's one reader."""
        n = producer.get(t)
        return n if private(t) and n.name not in keep and n.name not in gone and _head_swap(n, program) else None

    for idx, node in enumerate(program.nodes):
        a, ins, cut = node.attrs, list(node.inputs), None
        if node.op == "rotary" and not a.get("tokens_first") and (cut := split(ins[0])) is not None:
            ins[0], a = cut.inputs[0], {**a, "tokens_first": True}
        elif (node.op == "scatter" and a.get("along") or node.op == "index_copy_q8") and not a.get("src_transpose") \
                and len(ins) == 3 and a.get("dim", 0) % 4 == 2 and len(program.tensors[ins[0]].shape) == 4 \
                and (cut := split(ins[2])) is not None:
            ins[2], a = cut.inputs[0], {**a, "src_transpose": [1, 2]}
        elif node.op in ("attention_cached", "attention_cached_q8") and not a.get("out_tokens_first") and private(node.outputs[0]):
            merge = readers[node.outputs[0]][0]
            if merge.name in keep or not _head_swap(merge, program):
                continue
            program.tensors.pop(node.outputs[0])
            program.nodes[idx] = type(node)(node.op, ins, list(merge.outputs), {**a, "out_tokens_first": True},
                                            name=node.name)
            gone.add(merge.name)
            continue
        if cut is None:
            continue
        program.tensors.pop(cut.outputs[0])
        program.nodes[idx] = type(node)(node.op, ins, list(node.outputs), a, name=node.name)
        gone.add(cut.name)
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return len(gone)


def pair_rotaries(program, keep=frozenset()) -> int:
    """Two rotary nodes by the same cos and sin (a layer's q and k) -> one, in the second's
    place, with both inputs and outputs (rotary's PAIR: one dispatch, each value as before), where
    nothing reads the first's output before that place. Returns the pairs merged."""
    gone, merged = set(), 0
    for j, second in enumerate(program.nodes):
        if second.op != "rotary" or len(second.inputs) != 3:
            continue
        for i in range(j - 1, -1, -1):
            first = program.nodes[i]
            if first.op == "rotary" and first.name not in gone and first.name not in keep and len(first.inputs) == 3 \
                    and first.inputs[1:] == second.inputs[1:] \
                    and bool(first.attrs.get("tokens_first")) == bool(second.attrs.get("tokens_first")):
                between = program.nodes[i + 1:j]
                if any(t in n.inputs for n in between for t in first.outputs) or first.outputs[0] in second.inputs:
                    break
                program.nodes[j] = type(second)("rotary", list(second.inputs) + [first.inputs[0]],
                                                list(second.outputs) + list(first.outputs), dict(second.attrs),
                                                name=second.name)
                gone.add(first.name)
                merged += 1
                break
            if first.op == "rotary":
                break
    program.nodes = [n for n in program.nodes if n.name not in gone]
    return merged

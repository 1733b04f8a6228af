#version 450
#extension GL_GOOGLE_include_directive : require
// index_copy_ in place (vkq/ops/logic.py: scatter along a dim with reduce "none" is the
// specification): a program's state (a static KV cache) written at the rows its index names,
// and nothing else touched. x is (outer, size, inner) around the dim, src (outer, k, inner);
// out[o, index[j], :] = src[o, j, :] (SCALAR: the one value src[0], index_fill's). The output
// buffer IS x's (the executor plans the update into the state's own buffer), so a decode step
// writes one row a KV head, not the whole cache. An invocation writes one chunk of CHUNK words
// of one (o, j) row; where a later j names the same row it writes nothing (the last write
// wins, as the reference and ATen's CPU kernel apply them in order); an index outside
// [-size, size) writes nothing. heads > 0: src's two dims before inner are swapped, (outer /
// heads, k, heads, inner) (a (B, T, H, D) projection written into a (B, H, N, D) cache, the
// transpose between folded in: vkq/ops/attention_cached.py fold_head_transposes).
// Q8 (index_copy_q8, vkq/ops/kv_q8.py): src (outer, k, D) float32 rows quantized into the int8
// KV cache's rows of inner = W + 1 words as they are written (include/kv_q8.glsl): one dispatch
// for kv_quantize and the write. An invocation a whole row (chunks = 1: its scale needs all of it).
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(constant_id = 3) const int CHUNK = 64;
layout(constant_id = 4) const int D = 64;       // Q8: a source row's values

//! variant
//! variant SCALAR
//! variant Q8
layout(std430, binding = 0) writeonly buffer Out { uint o[]; };
layout(std430, binding = 1) readonly buffer Index { int index[]; };
layout(std430, binding = 2) readonly buffer Src { uint src[]; };
layout(push_constant) uniform Params {
    int outer, size, inner, k, chunks, heads;
} p;

#ifdef Q8
float kv_q8_in(int i) { return uintBitsToFloat(src[i]); }
void kv_q8_out(int i, int word) { o[i] = uint(word); }
#include "kv_q8.glsl"
#endif

int row_of(int j) {
    const int at = index[j];
    return at < 0 ? at + p.size : at;
}

void main() {
    const int g = linear_invocation();
    if (g >= p.outer * p.k * p.chunks) {
        return;
    }
    const int c = g % p.chunks, j = (g / p.chunks) % p.k, outer = g / (p.chunks * p.k);
    const int at = row_of(j);
    if (at < 0 || at >= p.size) {
        return;
    }
    for (int later = j + 1; later < p.k; ++later) {
        if (row_of(later) == at) {
            return;
        }
    }
    const int row = p.heads > 0 ? (outer / p.heads * p.k + j) * p.heads + outer % p.heads : outer * p.k + j;
    const int dst = (outer * p.size + at) * p.inner;
#ifdef Q8
    kv_q8_row(row * D, dst);
#else
    const int lo = c * CHUNK, hi = min(lo + CHUNK, p.inner);
    const int from = row * p.inner;
    for (int i = lo; i < hi; ++i) {
#ifdef SCALAR
        o[dst + i] = src[0];
#else
        o[dst + i] = src[from + i];
#endif
    }
#endif
}

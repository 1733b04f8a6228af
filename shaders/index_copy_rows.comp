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
// [-size, size) writes nothing.
#include "common.glsl"

layout(constant_id = 3) const int CHUNK = 64;

//! variant
//! variant SCALAR
layout(std430, binding = 0) writeonly buffer Out { uint o[]; };
layout(std430, binding = 1) readonly buffer Index { int index[]; };
layout(std430, binding = 2) readonly buffer Src { uint src[]; };
layout(push_constant) uniform Params {
    int outer, size, inner, k, chunks;
} p;

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
    const int lo = c * CHUNK, hi = min(lo + CHUNK, p.inner);
    const int dst = (outer * p.size + at) * p.inner, from = (outer * p.k + j) * p.inner;
    for (int i = lo; i < hi; ++i) {
#ifdef SCALAR
        o[dst + i] = src[0];
#else
        o[dst + i] = src[from + i];
#endif
    }
}

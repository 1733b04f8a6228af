#version 450
#extension GL_GOOGLE_include_directive : require
// Advanced indexing of x's leading K dims by index tensors the device computed (vkq/ops/logic.py):
//   out[b, r] = x[i_0[b], ..., i_{K-1}[b], r]    (b over the indices' broadcast shape, r over x's
// other dims flattened), 32-bit words of any type: transformers' padding mask
// mask[batch_idx[:, None, None, None], kv_idx[None, None, None, :]] with a dynamic length.
// A negative index counts from the end, as torch's; one outside the dim is clamped into it
// (PyTorch raises; the reference clamps the same), so that no read leaves the buffer.
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;
layout(constant_id = 4) const int K = 1;        // index tensors (1-3)

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) readonly buffer I0 { int i0[]; };
layout(std430, binding = 2) readonly buffer I1 { int i1[]; };
layout(std430, binding = 3) readonly buffer I2 { int i2[]; };
layout(std430, binding = 4) writeonly buffer Out { uint o[]; };
layout(push_constant) uniform Params {
    int n, rank, rest, pad_;
    ivec4 shape;                // the indices' broadcast shape (merged, rank <= 4)
    ivec4 s0, s1, s2;           // each index's strides over it (0: broadcast)
    ivec4 lead;                 // x.shape[0..K-1]
    ivec4 row;                  // x's stride of each of those dims, in words
} p;

int wrapped(int v, int size) {
    return clamp(v < 0 ? v + size : v, 0, size - 1);
}

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
        int b = i / p.rest, r = i - b * p.rest;
        int o0 = 0, o1 = 0, o2 = 0, t = b;
        for (int d = p.rank - 1; d >= 0; --d) {
            int j = t % p.shape[d];
            t /= p.shape[d];
            o0 += j * p.s0[d];
            o1 += j * p.s1[d];
            o2 += j * p.s2[d];
        }
        int off = r + wrapped(i0[o0], p.lead[0]) * p.row[0];
        if (K > 1)
            off += wrapped(i1[o1], p.lead[1]) * p.row[1];
        if (K > 2)
            off += wrapped(i2[o2], p.lead[2]) * p.row[2];
        o[i] = x[off];
    }
}

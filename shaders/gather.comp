#version 450
#extension GL_GOOGLE_include_directive : require
// torch.gather by a data index (vkq/ops/logic.py): out[c] = x[c with c[dim] := index[c]] for
// every coordinate c of the index (= the output; c[d] < x.shape[d] on the other dims, as torch
// requires), 32-bit words of any type. An index outside [0, x.shape[dim]) is clamped into x,
// so that no read leaves the buffer (PyTorch raises; the reference clamps the same). Indices
// that are constants never get here: the lowering turns those gathers into a take.
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) readonly buffer Index { int index[]; };
layout(std430, binding = 2) writeonly buffer Out { uint o[]; };
layout(push_constant) uniform Params {
    int n, rank, dim, size;     // size: x.shape[dim]
    int shape[6];               // the output's (= the index's) shape
    int xs[6];                  // x's strides
} p;

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
        int off = 0, t = i;
        for (int d = p.rank - 1; d >= 0; --d) {
            int s = p.shape[d], j = t % s;
            t /= s;
            off += (d == p.dim ? clamp(index[i], 0, p.size - 1) : j) * p.xs[d];
        }
        o[i] = x[off];
    }
}

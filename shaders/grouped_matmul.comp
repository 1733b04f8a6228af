#version 450
#extension GL_GOOGLE_include_directive : require
// Grouped matmul of a mixture of experts (vkq/ops/float.py grouped_matmul: transformers'
// grouped_mm_fallback): x's rows sorted by expert, offs[e] the end of expert e's rows (a
// cumulative count); out[s, o] = sum_i x[s, i] w[e, i, o] for the expert e whose rows hold s,
// rows past the last offset 0 (as the fallback's zeros). An invocation an output value: its
// expert from the E offsets (a loop of E), then a dot of K products in order.
//! variant
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer Offs { int offs[]; };
layout(std430, binding = 3) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params { int n, K, N, E; } p;     // n = S x N outputs, x (S, K), w (E, K, N)

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
        const int s = i / p.N, col = i - s * p.N;
        int e = 0;
        for (int j = 0; j < p.E; ++j) e += int(offs[j] <= s);
        precise float acc = 0.0;
        if (e < p.E) {
            const int xb = s * p.K, wb = e * p.K * p.N + col;
            for (int t = 0; t < p.K; ++t) acc += x[xb + t] * w[wb + t * p.N];
        }
        o[i] = acc;
    }
}

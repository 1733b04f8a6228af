#version 450
#extension GL_GOOGLE_include_directive : require
// Rotary position embedding (vkq/ops/rotary.py is the specification), transformers'
// apply_rotary_pos_emb on one of q / k in one dispatch instead of seven (two slices, a neg, a
// cat, two multiplies and an add):
//   out[b, h, t, d] = x[b, h, t, d] * cos[b, t, d] + rot[b, h, t, d] * sin[b, t, d]
//   rot = cat(-x[..., D/2:], x[..., :D/2])        (rotate_half)
// each product and the sum rounded once (`precise`: no fused multiply-add), as torch's eager
// ops round them, so the result is the reference's bit for bit. cos / sin: (B or 1, T, D),
// shared by the heads. An invocation takes PER consecutive values.
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Cos { float c[]; };
layout(std430, binding = 2) readonly buffer Sin { float s[]; };
layout(std430, binding = 3) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params {
    int n, d, t, h, cos_batch;      // cos_batch: cos / sin's stride between batches (0: one for all)
} p;

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    const int half_d = p.d / 2;
    int i = linear_invocation();
    for (int e = 0; e < PER && i < p.n; ++e, i += stride) {
        int f = i;
        const int k = peel(f, p.d);
        const int row = peel(f, p.t);          // t; f is now b * H + head
        const int b = div_exact(f, p.h);
        const int ci = b * p.cos_batch + row * p.d + k;
        const float r = k < half_d ? -x[i + half_d] : x[i - half_d];
        precise float a = x[i] * c[ci];
        precise float q = r * s[ci];
        precise float y = a + q;
        o[i] = y;
    }
}

#version 450
#extension GL_GOOGLE_include_directive : require
// Rotary position embedding (vkq/ops/rotary.py is the specification), transformers'
// apply_rotary_pos_emb on one of q / k in one dispatch instead of seven (two slices, a neg, a
// cat, two multiplies and an add):
//   out[b, h, t, d] = x[b, h, t, d] * cos[b, t, d] + rot[b, h, t, d] * sin[b, t, d]
//   rot = cat(-x[..., D/2:], x[..., :D/2])        (rotate_half)
// each product and the sum rounded once (`precise`: no fused multiply-add), as torch's eager
// ops round them, so the result is the reference's bit for bit. cos / sin: (B or 1, T, D),
// shared by the heads. An invocation takes PER consecutive values. tokens_first: x is
// (B, T, H, D) (a projection's head split, the transpose to (B, H, T, D) folded in: vkq/ops/
// attention_cached.py fold_head_transposes), read at x[b, t, h, d]; out stays (B, H, T, D).
// PAIR: a second x (binding 4, n2 values, h2 heads, the same cos / sin) into a second output
// (binding 5) in the same dispatch: q's and k's rotations, one dispatch (pair_rotaries).
//! variant
//! variant PAIR
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Cos { float c[]; };
layout(std430, binding = 2) readonly buffer Sin { float s[]; };
layout(std430, binding = 3) writeonly buffer Out { float o[]; };
#ifdef PAIR
layout(std430, binding = 4) readonly buffer X2 { float x2[]; };
layout(std430, binding = 5) writeonly buffer Out2 { float o2[]; };
#endif
layout(push_constant) uniform Params {
    int n, d, t, h, cos_batch;      // cos_batch: cos / sin's stride between batches (0: one for all)
    int tokens_first;
    int n2, h2;                     // PAIR: the second x's values and heads (0 otherwise)
} p;

float xat(bool second, int j) {
#ifdef PAIR
    if (second) return x2[j];
#endif
    return x[j];
}

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    const int half_d = p.d / 2;
    int i = linear_invocation();
    for (int e = 0; e < PER && i < p.n + p.n2; ++e, i += stride) {
        const bool second = i >= p.n;
        const int at = second ? i - p.n : i, h = second ? p.h2 : p.h;
        int f = at;
        const int k = peel(f, p.d);
        const int row = peel(f, p.t);          // t; f is now b * H + head
        const int b = div_exact(f, h);
        const int ci = b * p.cos_batch + row * p.d + k;
        const int xi = p.tokens_first != 0 ? ((b * p.t + row) * h + (f - b * h)) * p.d + k : at;
        const float r = k < half_d ? -xat(second, xi + half_d) : xat(second, xi - half_d);
        precise float a = xat(second, xi) * c[ci];
        precise float q = r * s[ci];
        precise float y = a + q;
#ifdef PAIR
        if (second) {
            o2[at] = y;
            continue;
        }
#endif
        o[at] = y;
    }
}

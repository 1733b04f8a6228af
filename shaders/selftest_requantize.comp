#version 450
#extension GL_GOOGLE_include_directive : require
// Test shader for include/requant.glsl: out[i] = requantize(acc[i], m[i], s[i], ...),
// one value per int32 (not packed), so every edge case can be compared with vkq.quant.
// CLAMPED: requantize_clamped with s[i] = (bound, lshift, rshift, frac) from requant_clamp_params
// and requant_clamp_frac.
//! variant
//! variant CLAMPED
#include "common.glsl"
#include "requant.glsl"

layout(std430, binding = 0) readonly buffer Acc { int acc[]; };
layout(std430, binding = 1) readonly buffer M { int m[]; };
#ifdef CLAMPED
layout(std430, binding = 2) readonly buffer S { ivec4 s[]; };   // (bound, lshift, rshift, frac)
#else
layout(std430, binding = 2) readonly buffer S { int s[]; };
#endif
layout(std430, binding = 3) writeonly buffer Out { int o[]; };
layout(push_constant) uniform Params { int n, zero_point, qmin, qmax; } p;

void main() {
    int i = linear_invocation();
    if (i >= p.n) return;
#ifdef CLAMPED
    o[i] = requantize_clamped(acc[i], s[i].x, s[i].y, m[i], s[i].z, s[i].w, p.zero_point, p.qmin, p.qmax, true, true);
#else
    o[i] = requantize(acc[i], m[i], s[i], p.zero_point, p.qmin, p.qmax);
#endif
}

#version 450
#extension GL_GOOGLE_include_directive : require
// Test shader for common.glsl's div_exact: q[i] = div_exact(n[i], d[i]), one pair per
// invocation, so that its edge cases (quotients next to an integer, n near 2^30, d of 1 and
// of n) can be compared with numpy's floor division.
//! variant
#include "common.glsl"

layout(std430, binding = 0) readonly buffer N { int n[]; };
layout(std430, binding = 1) readonly buffer D { int d[]; };
layout(std430, binding = 2) writeonly buffer Q { int q[]; };
layout(push_constant) uniform Params { int count; } p;

void main() {
    const int i = linear_invocation();
    if (i < p.count) q[i] = div_exact(n[i], d[i]);
}

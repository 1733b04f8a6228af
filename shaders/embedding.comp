#version 450
#extension GL_GOOGLE_include_directive : require
// Embedding gather (vkq/ops/logic.py): out[i, j] = table[ids[i], j] for R ids and rows of D
// float32 words; an id outside [0, rows) is clamped into the table, so
// that no read leaves the buffer (PyTorch raises on such an id; the reference clamps the same).
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer Table { uint table[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly buffer Out { uint o[]; };
layout(push_constant) uniform Params { int n, D, rows; } p;

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
        int r = clamp(ids[i / p.D], 0, p.rows - 1);
        o[i] = table[r * p.D + i % p.D];
    }
}

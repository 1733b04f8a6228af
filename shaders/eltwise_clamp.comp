#version 450
#extension GL_GOOGLE_include_directive : require
// Standalone relu / relu6 / hardtanh on packed int8 (clamp_q8 in vkq/ops/eltwise.py):
//   out = requantize(q - in_zp, m, s, out_zp, qmin, qmax)
// With equal input and output qparams (M = 1: m = 2^30, s = 30, in_zp == out_zp) that is
// exactly clamp(q, qmin, qmax), and REQUANT = 0 skips the multiply.
// One invocation per ivec4 block; padding bytes are written 0.
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int REQUANT = 1;

layout(std430, binding = 0) readonly buffer In { ivec4 q[]; };
layout(std430, binding = 1) writeonly buffer Out { ivec4 o[]; };
layout(push_constant) uniform Params {
    ivec4 geo;       // block_mask geometry
    int blocks;
    int in_zp, m, s, out_zp, qmin, qmax;
} p;

void main() {
    int i = linear_invocation();
    if (i >= p.blocks) return;
    ivec4 w = q[i], r;
    for (int j = 0; j < 4; ++j) {
        ivec4 v = unpack_int8x4(w[j]);
        if (REQUANT != 0)
            v = requantize4(v - p.in_zp, ivec4(p.m), ivec4(p.s), p.out_zp, p.qmin, p.qmax);
        else
            v = clamp(v, p.qmin, p.qmax);
        r[j] = pack_int8x4(v);
    }
    o[i] = r & block_mask(i, p.geo);
}

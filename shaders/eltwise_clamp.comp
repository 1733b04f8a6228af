#version 450
#extension GL_GOOGLE_include_directive : require
// Standalone relu / relu6 / hardtanh on packed int8 (clamp_q8 in vkq/ops/eltwise.py):
//   REQUANT: out = requantize(q - in_zp, m, s, out_zp, qmin, qmax)   (as requantize_clamped)
//   else:    out = clamp(q, qmin, qmax)   exactly the same when M = 1 (m = 2^30, s = 30) and
//                                         in_zp == out_zp, and much cheaper on SwiftShader
// Each invocation does PER ivec4 blocks, grid-strided; padding bytes are written 0. The block
// geometry is specialization constants (see eltwise_binary.comp).
//! variant
//! variant REQUANT
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int PER = 1;
layout(constant_id = 4) const int BYTE_DIM = 4;      // block_mask geometry
layout(constant_id = 5) const int BYTE_BLOCKS = 1;
layout(constant_id = 6) const int WORD_DIM = 4;
layout(constant_id = 7) const int WORD_BLOCKS = 1;

layout(std430, binding = 0) readonly buffer In { ivec4 q[]; };
layout(std430, binding = 1) writeonly buffer Out { ivec4 o[]; };
layout(push_constant) uniform Params {
    int blocks;
    int in_zp;
    int bound, lshift, m, rshift;   // vkq.quant.requant_clamp_params
    int out_zp, qmin, qmax;
} p;

int word(int w) {
#ifdef REQUANT
    ivec4 v = unpack_int8x4(w) - p.in_zp, r;
    for (int c = 0; c < 4; ++c)
        r[c] = requantize_clamped(v[c], p.bound, p.lshift, p.m, p.rshift, p.out_zp, p.qmin, p.qmax);
    return pack_int8x4(r);
#else
    return pack_int8x4(clamp(unpack_int8x4(w), p.qmin, p.qmax));
#endif
}

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    ivec4 geo = ivec4(BYTE_DIM, BYTE_BLOCKS, WORD_DIM, WORD_BLOCKS);
    for (int k = 0; k < PER && i < p.blocks; ++k, i += stride) {
        ivec4 w = q[i];
        // before_store: common.glsl, as in eltwise_binary
        o[i] = before_store(ivec4(word(w.x), word(w.y), word(w.z), word(w.w)) & block_mask(i, geo));
    }
}

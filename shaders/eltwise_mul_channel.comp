#version 450
#extension GL_GOOGLE_include_directive : require
// int8 x (N, C, H, W) * int8 s (N or 1, C, 1, 1) -> int8 (N, C, H, W): mul_q8 with a per-channel
// operand broadcast over H x W (squeeze-excitation's gate). x, s and out share a layout:
//   GATE_4W4C: x block i = ((n*H + h)*W4 + w4)*C4 + c4 holds 4 widths x 4 channels; s's block
//                (n, c4) is s[n*C4 + c4], whose word 0 (w = 0) holds those 4 channels
//   GATE_4H4W: x block i = ((n*C + c)*H4 + h4)*W4 + w4 is one channel; s's value for (n, c)
//                is byte 0 of word 0 of s block n*C + c
//   acc = (x - a_zp) * (s - b_zp); out = requantize(acc, m, s, out_zp, qmin, qmax)
// Each invocation does PER ivec4 blocks, grid-strided; padding bytes are written 0.
//! variant GATE_4W4C
//! variant GATE_4H4W
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int PER = 1;

layout(std430, binding = 0) readonly buffer A { ivec4 a[]; };
layout(std430, binding = 1) readonly buffer B { ivec4 b[]; };
layout(std430, binding = 2) writeonly buffer Out { ivec4 o[]; };
layout(push_constant) uniform Params {
    ivec4 geo;       // block_mask geometry
    int blocks;
    int per_n;       // x blocks per batch item
    int per_s;       // 4W4C: channel blocks C4; 4H4W: x blocks per channel H4 * W4
    int s_batch;     // 1: s has N batch items, 0: one, broadcast
    int a_zp, b_zp, m, s, out_zp, qmin, qmax;
} p;

int word(int wa, ivec4 y) {
    ivec4 x = unpack_int8x4(wa) - p.a_zp;
    return pack_int8x4(requantize4(x * y, ivec4(p.m), ivec4(p.s), p.out_zp, p.qmin, p.qmax));
}

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.blocks; ++k, i += stride) {
        int n = (i / p.per_n) * p.s_batch;
#ifdef GATE_4W4C
        ivec4 y = unpack_int8x4(b[n * p.per_s + i % p.per_s].x) - p.b_zp;
#else
        int channels = p.per_n / p.per_s;                  // C: x blocks per batch item / per channel
        ivec4 y = ivec4(int8_at(b[n * channels + (i % p.per_n) / p.per_s].x, 0) - p.b_zp);
#endif
        ivec4 wa = a[i];
        // before_store: common.glsl, as in eltwise_binary
        o[i] = before_store(ivec4(word(wa.x, y), word(wa.y, y), word(wa.z, y), word(wa.w, y))
                            & block_mask(i, p.geo));
    }
}

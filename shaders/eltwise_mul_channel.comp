#version 450
#extension GL_GOOGLE_include_directive : require
// int8 x (N, C, H, W) * int8 s (N or 1, C, 1, 1) -> int8 (N, C, H, W): mul_q8 with a per-channel
// operand broadcast over H x W (squeeze-excitation's gate). x, s and out share a layout:
//   GATE_4W4C: x block i = ((n*H + h)*W4 + w4)*C4 + c4 holds 4 widths x 4 channels; s's block
//                (n, c4) is s[n*C4 + c4], whose word 0 (w = 0) holds those 4 channels
//   GATE_4H4W: x block i = ((n*C + c)*H4 + h4)*W4 + w4 is one channel; s's value for (n, c)
//                is byte 0 of word 0 of s block n*C + c
//   acc = (x - a_zp) * (s - b_zp); out = requantize(acc, m, s, out_zp, qmin, qmax), computed as
//   requantize_clamped with the host's constants (requant.glsl), as eltwise_binary does
// Each invocation does PER ivec4 blocks, grid-strided; padding bytes are written 0. The shape
// (x blocks per batch item and per gate block, the padding geometry) is specialization
// constants, so the index arithmetic divides by constants (by push constants: lane by lane on
// CPU drivers). lavapipe (Xeon, GPU time, idle, EfficientNet-B0's gates): (1, 144, 56, 56)
// 0.85 -> 0.36 ms, (1, 32, 112, 112) 0.78 -> 0.34, (1, 672, 14, 14) 0.33 -> 0.18, with this,
// requantize_clamped instead of requantize4, texel loads and 64-bit stores (TEXEL).
//! variant GATE_4W4C
//! variant GATE_4H4W
//! variant GATE_4W4C TEXEL
//! variant GATE_4H4W TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int PER = 1;
layout(constant_id = 4) const int BYTE_DIM = 4;      // block_mask geometry
layout(constant_id = 5) const int BYTE_BLOCKS = 1;
layout(constant_id = 6) const int WORD_DIM = 4;
layout(constant_id = 7) const int WORD_BLOCKS = 1;
layout(constant_id = 8) const int PER_N = 1;         // x blocks per batch item
layout(constant_id = 9) const int PER_S = 1;         // 4W4C: channel blocks C4; 4H4W: x blocks per channel H4 * W4
layout(constant_id = 10) const int S_BATCH = 0;      // 1: s has N batch items, 0: one, broadcast
layout(constant_id = 11) const int TIES = 1;         // 0: the host proved no accumulator ties (requant.glsl)

IVEC4_INPUT(0, a)     // texel.glsl
IVEC4_INPUT(1, b)
IVEC4_OUTPUT(2, o)
layout(push_constant) uniform Params {
    int blocks;
    int a_zp, b_zp;
    int bound, lshift, m, rshift;   // vkq.quant.requant_clamp_params
    int out_zp, qmin, qmax;
} p;

int word(int wa, ivec4 y) {
    const ivec4 acc = (unpack_int8x4(wa) - p.a_zp) * y;
    ivec4 q;
    for (int c = 0; c < 4; ++c)
        q[c] = requantize_clamped(acc[c], p.bound, p.lshift, p.m, p.rshift, p.out_zp, p.qmin, p.qmax, TIES != 0);
    return pack_int8x4(q);
}

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    const ivec4 geo = ivec4(BYTE_DIM, BYTE_BLOCKS, WORD_DIM, WORD_BLOCKS);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.blocks; ++k, i += stride) {
        const int n = (i / PER_N) * S_BATCH;
#ifdef GATE_4W4C
        const ivec4 y = unpack_int8x4(LOAD4(b, n * PER_S + i % PER_S).x) - p.b_zp;
#else
        const int channels = PER_N / PER_S;                // C: x blocks per batch item / per channel
        const ivec4 y = ivec4(int8_at(LOAD4(b, n * channels + (i % PER_N) / PER_S).x, 0) - p.b_zp);
#endif
        const ivec4 wa = LOAD4(a, i);
        // before_store: common.glsl, as in eltwise_binary
        STORE4(o, i, before_store(ivec4(word(wa.x, y), word(wa.y, y), word(wa.z, y), word(wa.w, y))
                                  & block_mask(i, geo)));
    }
}

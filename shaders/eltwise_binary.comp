#version 450
#extension GL_GOOGLE_include_directive : require
// int8 a (op) b -> int8, a, b and out of one shape and packed layout (vkq/ops/eltwise.py).
// Each invocation does PER ivec4 blocks (16 values each), grid-strided.
//   OP_ADD: acc = (a - a_zp) * a_mult + (b - b_zp) * b_mult      (add_q8, exact in int32)
//   OP_MUL: acc = (a - a_zp) * (b - b_zp)                         (mul_q8, |acc| <= 255^2)
//   out = requantize(acc, m, s, out_zp, qmin, qmax), computed as requantize_clamped with the
//   host's constants (requant.glsl; the same int8 result); padding bytes are written 0.
// The block geometry (which bytes are padding, block_mask.glsl) is specialization constants:
// a division by a variable runs lane by lane on CPU drivers and cost a quarter of the time.
// Measured (lavapipe, add of two 1x256x128x128 = 4 MiB tensors, CPU time against the copy
// roofline's, interleaved runs, machine shared): requantize's case analysis on s was ~70% of
// the kernel; with requantize_clamped and the constant geometry 0.21 -> 0.37 of copy bandwidth.
// No help: PER 1 (0.21) or 16 (0.18) instead of 4; a workgroup of one SIMD vector (8) instead
// of 64 (0.39 vs 0.37). before_store (common.glsl), so that the packing is not done lane by lane
// in the store's loop: 2.2 -> 1.8 ms (0.24 -> 0.29 of copy bandwidth, 2026-11-23). What is left
// is arithmetic: without the requantize 0.85x the time, without the loads 0.79x. TIES = 0 where
// vkq/quant.py:requant_tie_free proves no sum lands half way (generic scales; not dyadic ones
// such as the bench's 0.05 / 0.08): 0.91-0.94x the time.
// SHIFT_ONLY (add_q8 whose multiplier is 2^-shift, as vkq/ops/eltwise.py:add_q8_params makes
// it; add_shift_only gives offset and ties): acc = a * a_mult + b * b_mult + offset, then a
// rounding shift, no 64-bit product, the zero points folded into offset. With the loads and the
// store left alone (a xor of the two words: 0.69 ms) that arithmetic was the rest of the time:
// add 4 MiB 1.44 -> 1.08 ms (ties) / 0.99 ms (no ties), A-B-A-B, 2026-11-24.
//! variant OP_ADD
//! variant OP_MUL
//! variant OP_ADD TEXEL
//! variant OP_MUL TEXEL
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
layout(constant_id = 8) const int TIES = 1;      // 0: the host proved no accumulator ties (requant.glsl)
layout(constant_id = 9) const int SHIFT_ONLY = 0;

IVEC4_INPUT(0, a)     // texel.glsl
IVEC4_INPUT(1, b)
IVEC4_OUTPUT(2, o)
layout(push_constant) uniform Params {
    int blocks;
    int a_zp, b_zp, a_mult, b_mult;
    int bound, lshift, m, rshift;   // vkq.quant.requant_clamp_params
    int out_zp, qmin, qmax;
    int offset, shift;              // SHIFT_ONLY
} p;

// four values of a and of b (one word each) -> four outputs (one word)
int word(int wa, int wb) {
#ifdef OP_ADD
    if (SHIFT_ONLY != 0) {   // + 2^(shift-1) - 1 (in offset) + the floor's parity: half to even
        ivec4 acc = unpack_int8x4(wa) * p.a_mult + unpack_int8x4(wb) * p.b_mult + p.offset;
        acc += (acc >> p.shift) & TIES;
        return pack_int8x4(clamp((acc >> p.shift) + p.out_zp, p.qmin, p.qmax));
    }
#endif
    ivec4 x = unpack_int8x4(wa) - p.a_zp;
    ivec4 y = unpack_int8x4(wb) - p.b_zp;
#ifdef OP_ADD
    ivec4 acc = x * p.a_mult + y * p.b_mult;
#else
    ivec4 acc = x * y;
#endif
    ivec4 q;
    for (int c = 0; c < 4; ++c)
        q[c] = requantize_clamped(acc[c], p.bound, p.lshift, p.m, p.rshift, p.out_zp, p.qmin, p.qmax, TIES != 0);
    return pack_int8x4(q);
}

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    ivec4 geo = ivec4(BYTE_DIM, BYTE_BLOCKS, WORD_DIM, WORD_BLOCKS);
    for (int k = 0; k < PER && i < p.blocks; ++k, i += stride) {
        ivec4 wa = LOAD4(a, i), wb = LOAD4(b, i);
        STORE4(o, i, before_store(ivec4(word(wa.x, wb.x), word(wa.y, wb.y), word(wa.z, wb.z), word(wa.w, wb.w))
                                  & block_mask(i, geo)));   // common.glsl
    }
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// One input's share of a channel concatenation of 4W4C int8 tensors (cat_q8 in vkq/ops/cat_q8.py).
// The op runs one dispatch per input, in order; this one writes output channels
// [off, off + in_c): REQUANT: out = requantize(q - in_zp, m, s, out_zp) (as requantize_clamped
// with the host's constants, requant.glsl), else a copy.
// One invocation per output ivec4 block (4 widths x 4 channels) of channel blocks
// [off/4, ceil((off + in_c)/4)). When off % 4 = R != 0 every output word straddles two input
// words, a funnel shift:  out = (in[q] >>> 8*(4 - R)) | (in[q + 1] << 8*R).
// Bytes of channels < off belong to earlier inputs, already written: kept (read-modify-write,
// only where R != 0: the first block of an input that starts inside one); bytes of later
// channels are written 0 (the next dispatch fills them), and so is padding.
// R is a specialization constant (R = 0, the common case, compiles the funnel and the read
// back out) and the index divisions are div_exact (common.glsl: a division by a push constant
// runs lane by lane on CPU drivers). TEXEL: x through texel fetches, the output by 64-bit stores.
// lavapipe (Xeon, GPU time, idle), with requantize_clamped instead of requantize4: U-Net's
// 2 x (1, 64, 112, 112) 1.7 -> 1.4 ms, 4 x (1, 32, 28, 28) 0.38 -> 0.29, (1, 24 + 10 + 30, 56,
// 56) 0.53 -> 0.37-0.44, requantized 2 x (1, 64, 56, 56) 0.69 -> 0.53. Still ~0.35 of the copy
// roof: storing each block at index i instead of its place (wrong, a probe) gave 0.92 for U-Net's,
// the divisions left out 1.3, before_store (common.glsl) nothing.
//! variant
//! variant REQUANT
//! variant TEXEL
//! variant REQUANT TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int R = 0;          // off % 4
layout(constant_id = 4) const int TIES = 1;       // 0: the host proved no value ties (requant.glsl)

IVEC4_INPUT(0, src)     // texel.glsl
IVEC4_INOUT(1, dst)
layout(push_constant) uniform Params {
    int positions;         // N * H * W/4 block positions
    int W, C, off, in_c;   // width; output channels; this input's first channel and count
    int c4_lo, nc4;        // output channel blocks this dispatch writes
    int in_zp, bound, lshift, m, rshift, out_zp;   // REQUANT: vkq.quant.requant_clamp_params
} p;

ivec4 load(int pos, int q, int in_c4) {    // q < 0 or past the input: zeros (the load clamped)
    const ivec4 v = LOAD4(src, pos * in_c4 + clamp(q, 0, in_c4 - 1));
    return q >= 0 && q < in_c4 ? v : ivec4(0);
}

int requant_word(int w) {
    const ivec4 x = unpack_int8x4(w) - p.in_zp;
    ivec4 q;
    [[unroll]] for (int c = 0; c < 4; ++c)
        q[c] = requantize_clamped(x[c], p.bound, p.lshift, p.m, p.rshift, p.out_zp, -128, 127, TIES != 0);
    return pack_int8x4(q);
}

void main() {
    const int i = linear_invocation();
    if (i >= p.positions * p.nc4) return;
    const int pos = div_exact(i, p.nc4), c4 = p.c4_lo + i - pos * p.nc4;   // pos = (n*H + h)*W4 + w4
    const int C4 = up4(p.C) / 4, in_c4 = up4(p.in_c) / 4, W4 = up4(p.W) / 4;
    const int q = (4 * c4 - p.off) >> 2;                                  // floor((4 c4 - off) / 4)
    ivec4 w = load(pos, q, in_c4);
    if (R != 0)
        w = ivec4(uvec4(w) >> (8 * (4 - R))) | (load(pos, q + 1, in_c4) << (8 * R));
#ifdef REQUANT
    w = ivec4(requant_word(w.x), requant_word(w.y), requant_word(w.z), requant_word(w.w));
#endif
    const int o = pos * C4 + c4;
    const int below = R != 0 ? byte_mask(p.off - 4 * c4) : 0;           // earlier inputs' channels
    const int mine = byte_mask(p.off + p.in_c - 4 * c4) & ~below;
    const int w4 = pos - div_exact(pos, W4) * W4;
    const ivec4 words = mix(ivec4(0), ivec4(-1), lessThan(ivec4(0, 1, 2, 3), ivec4(p.W - 4 * w4)));
    ivec4 v = w & mine;
    if (R != 0 && below != 0) v |= RELOAD4(dst, o) & below;
    STORE4(dst, o, v & words);
}

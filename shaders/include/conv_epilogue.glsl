#ifndef VKQ_CONV_EPILOGUE_GLSL
#define VKQ_CONV_EPILOGUE_GLSL
// The conv2d_q8 epilogue, shared by its kernels (host side: vkq/ops/conv.py, epilogue_push and
// pack_channels). Include after int8x4.glsl, texel.glsl and requant.glsl; the shader's push constants end
// with an `Epilogue epi` member, which it passes to out_word. Per output word (4 consecutive
// channels at one position, accumulators without bias):
//   q = requantize_clamped(acc + bias_eff, bound, lshift, m, rshift, frac, out_zp, qmin, qmax)
//   (frac: the bias's fraction, vkq/quant.py:split_bias; FRAC = 0 where every channel's is 0)
//   RESIDUAL  a residual add folded in (vkq/passes/fuse_epilogue.py): r is the add's other operand,
//             read at the output's own word, and q becomes add_q8(q, r) exactly as
//             shaders/eltwise_binary.comp computes it:
//               acc2 = (q - conv_zp) * conv_mult + (r - other_zp) * other_mult   (exact in int32)
//               q    = requantize_clamped(acc2, the add's constants, its out_zp, qmin, qmax)
//   LUT       q = table[q + 128]: an int8 -> int8 lookup table (lut_lookup.glsl), e.g. an
//             activation applied after requantization
// Bytes past `valid` channels are 0 (the 4W4C padding).
#include "texel.glsl"

struct Epilogue {     // push constants, 32-bit words in this order
    int out_zp, qmin, qmax;
#ifdef RESIDUAL
    int conv_zp, conv_mult, other_zp, other_mult;      // the add's operands: conv output, other
    int bound, lshift, m, rshift, add_zp, add_qmin, add_qmax;   // the add's requantization
#endif
};

struct Chan4 {        // the requantize_clamped constants of 4 consecutive output channels
    ivec4 bias, bound, m, shifts;   // shifts = lshift | rshift << 5 | frac (vkq/quant.py:shift_word)
};

#ifdef RESIDUAL
IVEC4_INPUT(4, res)   // 4W4C, the output's shape (texel.glsl)
#endif
#ifdef LUT
#ifdef RESIDUAL
#define LUT_BINDING 5
#else
#define LUT_BINDING 4
#endif
#include "lut_lookup.glsl"
#endif

// the residual operand's block at the output's ivec4 index (zeros without RESIDUAL)
ivec4 residual_block(int idx) {
#ifdef RESIDUAL
    return LOAD4(res, idx);
#else
    return ivec4(0);
#endif
}

// channel k of a tile's table row `row` (0 bias, 1 bound, 2 m, 3 shifts), TOC channels a row:
// the words come from registers r[] shared by the G lanes of a group (conv_common.glsl)
#define CHAN4(r, toc, k) Chan4(ivec4(SHARE(r, k), SHARE(r, k + 1), SHARE(r, k + 2), SHARE(r, k + 3)), \
    ivec4(SHARE(r, toc + k), SHARE(r, toc + k + 1), SHARE(r, toc + k + 2), SHARE(r, toc + k + 3)), \
    ivec4(SHARE(r, 2 * toc + k), SHARE(r, 2 * toc + k + 1), SHARE(r, 2 * toc + k + 2), SHARE(r, 2 * toc + k + 3)), \
    ivec4(SHARE(r, 3 * toc + k), SHARE(r, 3 * toc + k + 1), SHARE(r, 3 * toc + k + 2), SHARE(r, 3 * toc + k + 3)))

ivec4 requantize_chan4(ivec4 acc, Chan4 c, int zp, int qmin, int qmax) {
    // frac is a multiple of 2^10 in the shift word's top 22 bits: masked out, it is itself
    ivec4 ls = c.shifts & 31, rs = FRAC != 0 ? (c.shifts >> 5) & 31 : c.shifts >> 5, fr = c.shifts & ~1023;
    bool t = TIES != 0, f = FRAC != 0;
    return ivec4(requantize_clamped(acc.x, c.bound.x, ls.x, c.m.x, rs.x, fr.x, zp, qmin, qmax, t, f),
                 requantize_clamped(acc.y, c.bound.y, ls.y, c.m.y, rs.y, fr.y, zp, qmin, qmax, t, f),
                 requantize_clamped(acc.z, c.bound.z, ls.z, c.m.z, rs.z, fr.z, zp, qmin, qmax, t, f),
                 requantize_clamped(acc.w, c.bound.w, ls.w, c.m.w, rs.w, fr.w, zp, qmin, qmax, t, f));
}

// acc: the 4 channels' sums at one position; other: the residual operand's word there (unused
// without RESIDUAL); e: the shader's push constants p.epi
int out_word(ivec4 acc, Chan4 c, int valid, int other, Epilogue e) {
    ivec4 q = requantize_chan4(acc + c.bias, c, e.out_zp, e.qmin, e.qmax);
#ifdef RESIDUAL
    ivec4 a = (q - e.conv_zp) * e.conv_mult + (unpack_int8x4(other) - e.other_zp) * e.other_mult;
    q = ivec4(requantize_clamped(a.x, e.bound, e.lshift, e.m, e.rshift, e.add_zp, e.add_qmin, e.add_qmax, RES_TIES != 0),
              requantize_clamped(a.y, e.bound, e.lshift, e.m, e.rshift, e.add_zp, e.add_qmin, e.add_qmax, RES_TIES != 0),
              requantize_clamped(a.z, e.bound, e.lshift, e.m, e.rshift, e.add_zp, e.add_qmin, e.add_qmax, RES_TIES != 0),
              requantize_clamped(a.w, e.bound, e.lshift, e.m, e.rshift, e.add_zp, e.add_qmin, e.add_qmax, RES_TIES != 0));
#endif
#ifdef LUT
    q = lut_lookup(q);
#endif
    return pack_int8x4(mix(ivec4(0), q, lessThan(ivec4(0, 1, 2, 3), ivec4(valid))));
}
#endif

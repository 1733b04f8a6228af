#version 450
#extension GL_GOOGLE_include_directive : require
// 2-D max / average pool of a 4W4C int8 tensor, PyTorch's window geometry (vkq/ops/pool.py).
// The geometry is specialization constants, so the tap loops have fixed trip counts (CPU
// drivers unroll them: 2-3x faster on lavapipe than loops over computed bounds).
// One invocation per output ivec4 block: 4 output widths x 4 channels at fixed (n, oh).
//   taps of output o along a dim: o*stride - pad + t*dil, t in [0, k); taps outside the input
//   are read clamped and replaced by FILL, so every load is in bounds and nothing branches
//   MAX: out = max of the taps (FILL = -128: a window with no input tap gives -128, as
//        quantize(-inf) does); same qparams in and out
//   AVG: acc = sum of (q - in_zp) over the in-input taps (FILL = 0, the count excludes them);
//        out = requantize(acc, table[oh*OW + ow], ...), the host folding each position's
//        divisor (count_include_pad, borders, divisor_override) into its multiplier
//! variant MAX
//! variant AVG
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int KH = 1;
layout(constant_id = 4) const int KW = 1;
layout(constant_id = 5) const int SH = 1;
layout(constant_id = 6) const int SW = 1;
layout(constant_id = 7) const int PH = 0;
layout(constant_id = 8) const int PW = 0;
layout(constant_id = 9) const int DH = 1;
layout(constant_id = 10) const int DW = 1;

layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) writeonly buffer Out { ivec4 dst[]; };
#ifdef AVG
layout(std430, binding = 2) readonly buffer Table { ivec2 table[]; };  // (m, s) per (oh, ow)
const int FILL = 0;
#else
const int FILL = int(0x80808080);   // four -128s
#endif
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, C, OH, OW
    int in_zp, out_zp, qmin, qmax;
} p;

// one output word: 4 channels (block c4) at (n, oh, ow)
int window(int n, int oh, int ow, int c4) {
    int H = p.in_shape.z, W = p.in_shape.w, C4 = up4(p.in_shape.y) / 4, W4 = up4(W) / 4;
    ivec4 acc = unpack_int8x4(FILL);
    for (int kh = 0; kh < KH; ++kh) {
        int ih = oh * SH - PH + kh * DH;
        bool row_in = ih >= 0 && ih < H;
        int row = (n * H + clamp(ih, 0, H - 1)) * W4;
        for (int kw = 0; kw < KW; ++kw) {
            int iw = ow * SW - PW + kw * DW, c = clamp(iw, 0, W - 1);
            int word = src[((row + c / 4) * C4 + c4) * 4 + c % 4];
            ivec4 v = unpack_int8x4(row_in && iw >= 0 && iw < W ? word : FILL);
#ifdef AVG
            acc += v;
#else
            acc = max(acc, v);
#endif
        }
    }
#ifdef AVG   // no dilation: the in-input taps are a box
    int ih0 = oh * SH - PH, iw0 = ow * SW - PW;
    int count = max(min(ih0 + KH, H) - max(ih0, 0), 0) * max(min(iw0 + KW, W) - max(iw0, 0), 0);
    ivec2 ms = table[oh * p.out_shape.w + min(ow, p.out_shape.w - 1)];
    acc = requantize4(acc - count * p.in_zp, ivec4(ms.x), ivec4(ms.y), p.out_zp, p.qmin, p.qmax);
#endif
    return pack_int8x4(acc);
}

void main() {
    int i = linear_invocation();
    int C = p.in_shape.y, OH = p.out_shape.z, OW = p.out_shape.w;
    int C4 = up4(C) / 4, OW4 = up4(OW) / 4;
    if (i >= p.out_shape.x * OH * OW4 * C4) return;
    // i = ((n*OH + oh)*OW4 + ow4)*C4 + c4, the 4W4C block index of the output
    int c4 = i % C4, ow4 = (i / C4) % OW4, oh = (i / (C4 * OW4)) % OH, n = i / (C4 * OW4 * OH);
    int ow = 4 * ow4;   // words past OW are computed (all loads clamped in bounds) and masked
    ivec4 r = ivec4(window(n, oh, ow, c4), window(n, oh, ow + 1, c4),
                    window(n, oh, ow + 2, c4), window(n, oh, ow + 3, c4));
    dst[i] = r & block_mask(i, ivec4(C, C4, OW, OW4));
}

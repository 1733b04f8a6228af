#version 450
#extension GL_GOOGLE_include_directive : require
// 2-D pooling of a 4W4C int8 tensor (vkq/ops/pool.py). One invocation per output ivec4 block:
// 4 output widths x 4 channels at fixed (n, oh); each tap reads one input word (4 channels).
//   window taps (regular):  o*stride - pad + t*dil, t in [0, k), only those inside the input
//   window taps (ADAPTIVE): [floor(o*n/out), ceil((o+1)*n/out))
//   MAX: out = max of the taps (-128 for a window with none); same qparams in and out
//   AVG: acc = sum of (q - in_zp) over the taps; out = requantize(acc, table[oh*OW + ow], ...)
//        the host folds the divisor of each output position (count_include_pad, borders,
//        divisor_override) into that position's multiplier
//! variant MAX
//! variant AVG
//! variant AVG ADAPTIVE
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) writeonly buffer Out { ivec4 dst[]; };
#ifdef AVG
layout(std430, binding = 2) readonly buffer Table { ivec2 table[]; };  // (m, s) per (oh, ow)
#endif
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, C, OH, OW
    ivec4 ks;          // kernel h, w; stride h, w
    ivec4 pd;          // padding h, w; dilation h, w
    int in_zp, out_zp, qmin, qmax;
} p;

// (first tap, number of taps) of window o along a dim of n inputs (outs outputs)
ivec2 taps(int o, int n, int outs, int k, int stride, int pad, int dil) {
#ifdef ADAPTIVE
    int start = (o * n) / outs;
    return ivec2(start, ((o + 1) * n + outs - 1) / outs - start);
#else
    int x0 = o * stride - pad;
    int t0 = x0 < 0 ? (dil - 1 - x0) / dil : 0;              // first tap >= 0
    int t1 = x0 < n ? min(k, (n - x0 + dil - 1) / dil) : 0;   // taps < n
    return ivec2(x0 + t0 * dil, max(t1 - t0, 0));
#endif
}

void main() {
    int i = linear_invocation();
    int C = p.in_shape.y, H = p.in_shape.z, W = p.in_shape.w, OH = p.out_shape.z, OW = p.out_shape.w;
    int C4 = up4(C) / 4, W4 = up4(W) / 4, OW4 = up4(OW) / 4;
    if (i >= p.out_shape.x * OH * OW4 * C4) return;
    // i = ((n*OH + oh)*OW4 + ow4)*C4 + c4, the 4W4C block index of the output
    int c4 = i % C4, ow4 = (i / C4) % OW4, oh = (i / (C4 * OW4)) % OH, n = i / (C4 * OW4 * OH);
    ivec2 rows = taps(oh, H, OH, p.ks.x, p.ks.z, p.pd.x, p.pd.z);
    ivec4 r = ivec4(0);
    for (int j = 0; j < 4; ++j) {
        int ow = ow4 * 4 + j;
        if (ow >= OW) break;
        ivec2 cols = taps(ow, W, OW, p.ks.y, p.ks.w, p.pd.y, p.pd.w);
#ifdef MAX
        ivec4 acc = ivec4(-128);
#else
        ivec4 acc = ivec4(0);
#endif
        for (int t = 0; t < rows.y; ++t) {
            int row = (n * H + rows.x + t * p.pd.z) * W4;
            for (int u = 0; u < cols.y; ++u) {
                int iw = cols.x + u * p.pd.w;
                ivec4 v = unpack_int8x4(src[((row + iw / 4) * C4 + c4) * 4 + iw % 4]);
#ifdef MAX
                acc = max(acc, v);
#else
                acc += v;
#endif
            }
        }
#ifdef AVG
        ivec2 ms = table[oh * OW + ow];
        acc = requantize4(acc - rows.y * cols.y * p.in_zp, ivec4(ms.x), ivec4(ms.y), p.out_zp, p.qmin, p.qmax);
#endif
        r[j] = pack_int8x4(acc);
    }
    dst[i] = r & block_mask(i, ivec4(C, C4, OW, OW4));
}

#version 450
#extension GL_GOOGLE_include_directive : require
// Adaptive pools (vkq/ops/pool.py). Window o along a dim of n inputs, out outputs:
//   [floor(o*n/out), ceil((o+1)*n/out))     (never empty; neighbours overlap where out does not divide n)
// default (adaptive_avg_pool2d_q8; output 1x1 runs as pool_global instead), 4W4C int8:
//   acc = sum of (q - in_zp) over the window; out = requantize(acc, s_in / (s_out * area))
//   as requantize_clamped with each output position's constants from the host (table).
// MAX (adaptive_max_pool2d_q8), 4W4C int8: out = the largest q of the window (max commutes with
//   quantization: the same qparams in and out).
// One invocation per output ivec4 block (4 output widths x 4 channels at fixed (n, oh)).
// FLOAT_MAX (adaptive_max_pool2d on float32 (..., H, W), N = the planes, C = 1): one invocation
//   per output value, the window's largest, NaN if it holds one (as ATen), exact.
// The shapes are specialization constants (the index divisions become multiplies).
//! variant
//! variant MAX
//! variant FLOAT_MAX
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int N = 1;
layout(constant_id = 4) const int C = 1;
layout(constant_id = 5) const int H = 1;
layout(constant_id = 6) const int W = 1;
layout(constant_id = 7) const int OH = 1;
layout(constant_id = 8) const int OW = 1;
const int C4 = (C + 3) / 4, W4 = (W + 3) / 4, OW4 = (OW + 3) / 4;

// (first index, count) of window o along a dim of n inputs and outs outputs
ivec2 window(int o, int n, int outs) {
    int start = (o * n) / outs;
    return ivec2(start, ((o + 1) * n + outs - 1) / outs - start);
}

#ifdef FLOAT_MAX
layout(std430, binding = 0) readonly buffer In { float src[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };

void main() {
    int i = linear_invocation();
    if (i >= N * OH * OW) return;
    int ow = i % OW, oh = (i / OW) % OH, plane = i / (OW * OH);
    ivec2 rows = window(oh, H, OH), cols = window(ow, W, OW);
    float m = uintBitsToFloat(0xff800000u);
    bool nan = false;
    for (int t = 0; t < rows.y; ++t) {
        int row = (plane * H + rows.x + t) * W + cols.x;
        for (int u = 0; u < cols.y; ++u) {
            float v = src[row + u];
            if (isnan(v)) nan = true; else m = max(m, v);
        }
    }
    dst[i] = nan ? uintBitsToFloat(0x7fc00000u) : m;
}
#else
layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) writeonly buffer Out { ivec4 dst[]; };
#ifndef MAX
// per (oh, ow): requantize_clamped's (bound, lshift, m, rshift) for that window's area
layout(std430, binding = 2) readonly buffer Table { ivec4 table[]; };
layout(push_constant) uniform Params {
    int in_zp, out_zp, qmin, qmax;
} p;
#endif

void main() {
    int i = linear_invocation();
    if (i >= N * OH * OW4 * C4) return;
    // i = ((n*OH + oh)*OW4 + ow4)*C4 + c4, the 4W4C block index of the output
    int c4 = i % C4, ow4 = (i / C4) % OW4, oh = (i / (C4 * OW4)) % OH, n = i / (C4 * OW4 * OH);
    ivec2 rows = window(oh, H, OH);
    ivec4 r = ivec4(0);
    for (int j = 0; j < 4; ++j) {
        int ow = ow4 * 4 + j;
        if (ow >= OW) break;
        ivec2 cols = window(ow, W, OW);
#ifdef MAX
        ivec4 acc = ivec4(-128);
#else
        ivec4 acc = ivec4(0);
#endif
        for (int t = 0; t < rows.y; ++t) {
            int row = (n * H + rows.x + t) * W4;
            for (int u = 0; u < cols.y; ++u) {
                int iw = cols.x + u;
                ivec4 v = unpack_int8x4(src[((row + iw / 4) * C4 + c4) * 4 + iw % 4]);
#ifdef MAX
                acc = max(acc, v);
#else
                acc += v;
#endif
            }
        }
#ifdef MAX
        r[j] = pack_int8x4(acc);
#else
        ivec4 rq = table[oh * OW + ow], q;
        acc -= rows.y * cols.y * p.in_zp;
        for (int c = 0; c < 4; ++c)
            q[c] = requantize_clamped(acc[c], rq.x, rq.y, rq.z, rq.w, p.out_zp, p.qmin, p.qmax);
        r[j] = pack_int8x4(q);
#endif
    }
    dst[i] = r & block_mask(i, ivec4(C, C4, OW, OW4));
}
#endif

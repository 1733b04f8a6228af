#version 450
#extension GL_GOOGLE_include_directive : require
// Adaptive average pool of a 4W4C int8 tensor (adaptive_avg_pool2d_q8 in vkq/ops/pool.py;
// output 1x1 runs as pool_global instead). Window o along a dim of n inputs, out outputs:
//   [floor(o*n/out), ceil((o+1)*n/out))
//   acc = sum of (q - in_zp) over the window; out = requantize(acc, s_in / (s_out * area))
// as requantize_clamped with each output position's constants from the host (table).
// One invocation per output ivec4 block (4 output widths x 4 channels at fixed (n, oh)); the
// shapes are specialization constants (the index divisions become multiplies).
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

layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) writeonly buffer Out { ivec4 dst[]; };
// per (oh, ow): requantize_clamped's (bound, lshift, m, rshift) for that window's area
layout(std430, binding = 2) readonly buffer Table { ivec4 table[]; };
layout(push_constant) uniform Params {
    int in_zp, out_zp, qmin, qmax;
} p;

// (first index, count) of window o along a dim of n inputs and outs outputs
ivec2 window(int o, int n, int outs) {
    int start = (o * n) / outs;
    return ivec2(start, ((o + 1) * n + outs - 1) / outs - start);
}

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
        ivec4 acc = ivec4(0);
        for (int t = 0; t < rows.y; ++t) {
            int row = (n * H + rows.x + t) * W4;
            for (int u = 0; u < cols.y; ++u) {
                int iw = cols.x + u;
                acc += unpack_int8x4(src[((row + iw / 4) * C4 + c4) * 4 + iw % 4]);
            }
        }
        ivec4 rq = table[oh * OW + ow], q;
        acc -= rows.y * cols.y * p.in_zp;
        for (int c = 0; c < 4; ++c)
            q[c] = requantize_clamped(acc[c], rq.x, rq.y, rq.z, rq.w, p.out_zp, p.qmin, p.qmax);
        r[j] = pack_int8x4(q);
    }
    dst[i] = r & block_mask(i, ivec4(C, C4, OW, OW4));
}

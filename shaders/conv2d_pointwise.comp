#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifndef NO_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
// conv2d_q8, pointwise kernel: 1x1, stride 1, no padding, groups 1, a GEMM over channels
// (vkq/ops/conv.py; x and y are 4W4C):
//   acc[oc, pos] = sum_c x[c, pos] * w[oc, c]          pos = h*W + w within one image
//   y[oc, pos]   = requantize(acc + bias_eff[oc], m[oc], s[oc], out_zp, qmin, qmax)
// (bias_eff = bias - x_zp * sum(w[oc]), folded on the host.)
//
// One invocation owns TB 4W4C blocks of 4 columns (running over the blocks of the image row by
// row) x TOC output channels, and stores TB * TOC/4 ivec4s (columns past W as 0: the 4W4C
// padding). Per block of 4 input channels it loads TB x ivec4s and the G lanes of a group share
// the TOC weight words (conv_common.glsl): every unpacked x value serves TOC channels and every
// weight word 4*TB positions.
// Exact fp32 accumulation as in conv2d_general.comp: CHUNK c4 blocks (4*CHUNK <= 2^10 products
// of |x*w| <= 2^14) per fp32 partial sum, then into the int32 total.
//! variant
//! variant NO_SUBGROUP
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "conv_common.glsl"
#include "conv_epilogue.glsl"

layout(constant_id = 4) const int TOC = 16;     // output channels per invocation, a multiple of 4
layout(constant_id = 5) const int TB = 2;       // 4-column blocks per invocation
layout(constant_id = 6) const int CHUNK = 256;  // c4 blocks per exact fp32 partial sum

const int TP = 4 * TB;                          // positions per invocation
const int WREGS = (TOC + G - 1) / G;
const int PREGS = (4 * TOC + G - 1) / G;

layout(std430, binding = 0) readonly buffer X { ivec4 x[]; };
// word (t*C4 + c4)*TOC + o: byte b = w[t*TOC + o, 4*c4 + b]
layout(std430, binding = 1) readonly buffer Wt { int w[]; };
// per output-channel tile t: bias_eff, bound, m, shifts (TOC each) at t*4*TOC (conv_epilogue.glsl)
layout(std430, binding = 2) readonly buffer Chan { int chan[]; };
layout(std430, binding = 3) writeonly buffer Y { ivec4 y[]; };
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, OC, H, W
    Epilogue epi;
} p;

void main() {
    const int N = p.in_shape.x, C4 = up4(p.in_shape.y) / 4, H = p.in_shape.z, W = p.in_shape.w;
    const int OC = p.out_shape.y, OC4 = up4(OC) / 4, W4 = up4(W) / 4, HB = H * W4;
    const int block_groups = (HB + TB * G - 1) / (TB * G), oc_tiles = (OC + TOC - 1) / TOC;

    // group q -> (image n, output-channel tile t, G*TB column blocks); lane -> TB of them
    const int q = group_index(), lane = group_lane();
    const int t = (q / block_groups) % oc_tiles;
    int n = q / (block_groups * oc_tiles);
    const bool live_n = n < N;
    n = min(n, N - 1);
    const int blk0 = ((q % block_groups) * G + lane) * TB;    // block (h, w4) of the image is h*W4 + w4
    const int wbase = t * C4 * TOC + lane;

    int acc[TP * TOC];           // (position 4*k + e, channel o) at (4*k + e)*TOC + o
    float part[TP * TOC];
    [[unroll]] for (int k = 0; k < TP * TOC; ++k) { acc[k] = 0; part[k] = 0.0; }
    for (int c0 = 0; c0 < C4; c0 += CHUNK) {
        const int c_end = min(c0 + CHUNK, C4);
        for (int c4 = c0; c4 < c_end; ++c4) {
            int wr[WREGS];
            [[unroll]] for (int i = 0; i < WREGS; ++i) wr[i] = w[wbase + c4 * TOC + i * G];
            vec4 xv[TP];
            [[unroll]] for (int k = 0; k < TB; ++k) {
                const ivec4 v = x[(n * HB + min(blk0 + k, HB - 1)) * C4 + c4];
                [[unroll]] for (int e = 0; e < 4; ++e) xv[4 * k + e] = vec4(unpack_int8x4(v[e]));
            }
            [[unroll]] for (int o = 0; o < TOC; ++o) {
                const vec4 wv = vec4(unpack_int8x4(SHARE(wr, o)));
                [[unroll]] for (int k = 0; k < TP; ++k)
                    part[k * TOC + o] = fma(xv[k].x, wv.x, fma(xv[k].y, wv.y, fma(xv[k].z, wv.z,
                                        fma(xv[k].w, wv.w, part[k * TOC + o]))));
            }
        }
        [[unroll]] for (int k = 0; k < TP * TOC; ++k) { acc[k] += int(part[k]); part[k] = 0.0; }
    }

    int pr[PREGS];
    [[unroll]] for (int i = 0; i < PREGS; ++i) pr[i] = chan[t * 4 * TOC + i * G + lane];
    [[unroll]] for (int b = 0; b < TOC / 4; ++b) {
        const Chan4 c = CHAN4(pr, TOC, 4 * b);
        const int oc4 = t * (TOC / 4) + b;
        [[unroll]] for (int k = 0; k < TB; ++k) {
            const int blk = blk0 + k, idx = (n * HB + blk) * OC4 + oc4;
            if (live_n && blk < HB && oc4 < OC4) {
                const ivec4 other = residual_block(idx);
                ivec4 words;
                [[unroll]] for (int e = 0; e < 4; ++e) {
                    const int a = (4 * k + e) * TOC + 4 * b;
                    const int word = out_word(ivec4(acc[a], acc[a + 1], acc[a + 2], acc[a + 3]), c, OC - 4 * oc4, other[e], p.epi);
                    words[e] = 4 * (blk % W4) + e < W ? word : 0;   // columns past W: 4W4C padding, 0
                }
                y[idx] = words;
            }
        }
    }
}

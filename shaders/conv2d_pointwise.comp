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
// One invocation owns TP consecutive positions (row-major, running across rows, so no column
// tile is wasted at a row's end) x TOC output channels. Per block of 4 input channels it loads
// TP x words and the G lanes of a group share the TOC weight words (conv_common.glsl): every
// unpacked x value serves TOC channels and every weight word TP positions.
// Exact fp32 accumulation as in conv2d_general.comp: CHUNK c4 blocks (4*CHUNK <= 2^10 products
// of |x*w| <= 2^14) per fp32 partial sum, then into the int32 total.
//! variant
//! variant NO_SUBGROUP
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "conv_common.glsl"

layout(constant_id = 4) const int TOC = 16;     // output channels per invocation, a multiple of 4
layout(constant_id = 5) const int TP = 8;       // positions per invocation
layout(constant_id = 6) const int CHUNK = 256;  // c4 blocks per exact fp32 partial sum

const int WREGS = (TOC + G - 1) / G;
const int PREGS = (3 * TOC + G - 1) / G;

layout(std430, binding = 0) readonly buffer X { int x[]; };
// word (t*C4 + c4)*TOC + o: byte b = w[t*TOC + o, 4*c4 + b]
layout(std430, binding = 1) readonly buffer Wt { int w[]; };
// per output-channel tile t: bias_eff[TOC], m[TOC], s[TOC] at t*3*TOC
layout(std430, binding = 2) readonly buffer Chan { int chan[]; };
layout(std430, binding = 3) writeonly buffer Y { int y[]; };
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, OC, H, W
    int out_zp, qmin, qmax;
} p;

void main() {
    const int N = p.in_shape.x, C4 = up4(p.in_shape.y) / 4, H = p.in_shape.z, W = p.in_shape.w;
    const int OC = p.out_shape.y, OC4 = up4(OC) / 4, W4 = up4(W) / 4, HW = H * W;
    const int pos_groups = (HW + TP * G - 1) / (TP * G), oc_tiles = (OC + TOC - 1) / TOC;

    // group q -> (image n, output-channel tile t, G*TP positions); lane -> TP of them
    const int q = group_index(), lane = group_lane();
    const int t = (q / pos_groups) % oc_tiles;
    int n = q / (pos_groups * oc_tiles);
    const bool live_n = n < N;
    n = min(n, N - 1);
    const int pos0 = ((q % pos_groups) * G + lane) * TP;

    int x_off[TP];   // word of (n, c4 = 0, position), clamped into the image
    [[unroll]] for (int k = 0; k < TP; ++k) {
        const int pos = min(pos0 + k, HW - 1), h = pos / W, ww = pos % W;
        x_off[k] = ((n * H + h) * W4 + (ww >> 2)) * C4 * 4 + (ww & 3);
    }
    const int wbase = t * C4 * TOC + lane;

    int acc[TP * TOC];           // (position k, channel o) at k*TOC + o
    float part[TP * TOC];
    [[unroll]] for (int k = 0; k < TP * TOC; ++k) { acc[k] = 0; part[k] = 0.0; }
    for (int c0 = 0; c0 < C4; c0 += CHUNK) {
        const int c_end = min(c0 + CHUNK, C4);
        for (int c4 = c0; c4 < c_end; ++c4) {
            int wr[WREGS];
            [[unroll]] for (int i = 0; i < WREGS; ++i) wr[i] = w[wbase + c4 * TOC + i * G];
            vec4 xv[TP];
            [[unroll]] for (int k = 0; k < TP; ++k) xv[k] = vec4(unpack_int8x4(x[x_off[k] + c4 * 4]));
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
    [[unroll]] for (int i = 0; i < PREGS; ++i) pr[i] = chan[t * 3 * TOC + i * G + lane];
    int bias[TOC], m[TOC], s[TOC];
    [[unroll]] for (int o = 0; o < TOC; ++o) {
        bias[o] = SHARE(pr, o);
        m[o] = SHARE(pr, TOC + o);
        s[o] = SHARE(pr, 2 * TOC + o);
    }
    [[unroll]] for (int k = 0; k < TP; ++k) {
        const int pos = pos0 + k, h = pos / W, ww = pos % W;
        [[unroll]] for (int b = 0; b < TOC / 4; ++b) {
            const int a = k * TOC + 4 * b, oc4 = t * (TOC / 4) + b;
            const int word = requant_word(
                ivec4(acc[a], acc[a + 1], acc[a + 2], acc[a + 3])
                    + ivec4(bias[4 * b], bias[4 * b + 1], bias[4 * b + 2], bias[4 * b + 3]),
                ivec4(m[4 * b], m[4 * b + 1], m[4 * b + 2], m[4 * b + 3]),
                ivec4(s[4 * b], s[4 * b + 1], s[4 * b + 2], s[4 * b + 3]),
                p.out_zp, p.qmin, p.qmax, OC - 4 * oc4);
            if (live_n && pos < HW && oc4 < OC4)
                y[(((n * H + h) * W4 + (ww >> 2)) * OC4 + oc4) * 4 + (ww & 3)] = word;
        }
    }
    // 4W4C padding columns W .. up4(W)-1 hold 0 (a buffer starts with whatever its memory
    // held): the invocation of column W-1 writes them, in a loop kept rolled (small code)
    if (live_n && (W & 3) != 0) {
        [[dont_unroll]] for (int pos = pos0 + W - 1 - pos0 % W; pos < min(pos0 + TP, HW); pos += W)
        [[dont_unroll]] for (int b = t * (TOC / 4); b < min(t * (TOC / 4) + TOC / 4, OC4); ++b)
        [[dont_unroll]] for (int ww = W; ww < W4 * 4; ++ww)
            y[(((n * H + pos / W) * W4 + (ww >> 2)) * OC4 + b) * 4 + (ww & 3)] = 0;
    }
}

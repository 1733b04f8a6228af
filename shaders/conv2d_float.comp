#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Float32 conv2d on NCHW (op conv2d, vkq/ops/conv.py): the convs that the dynamic and
// weight-only schemes leave float (they quantize linears only), a conv whose weight is computed
// in the graph (weight norm), and batch norm on float tensors (a depthwise 1x1 conv):
//   y[n, oc, oh, ow] = bias[oc] + sum_{c < CG, kh, kw}
//                      x[n, g*CG + c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw] * w[oc, c, kh, kw]
// with g = oc's group, taps outside the input adding nothing.
// An invocation computes TOC output channels of one group x TW consecutive output columns of one
// row: each x value it loads serves TOC channels, each weight TW columns. The kernel size,
// stride and dilation are specialization constants (the tap loops unroll, a row's window is
// loaded once); padding and groups push constants.
// Weights: constants are packed per tile of TOC channels (conv.py _pack_float_weights), a tap's
// TOC weights side by side, read as TOC / 4 vec4s (llvmpipe runs each buffer load as a loop over
// its lanes: 16 scalar weight loads a tap were most of this kernel's time);
//   wp[((t*CG + c)*KH*KW + tap)*TOC + j] = weight[group(t)*OCG + tile_in_group(t)*TOC + j, c, tap]
// (zero past the group's last channel). RAW: a weight computed in the graph (weight norm), read
// as it is, (OC, CG, KH, KW) row-major, a scalar a tap and channel. bias (OC) as it is; a
// tile's channels past its group's last read the last one's (clamped index), not stored.
// Float sums in another order than the reference's: |error| <= K eps sum |x w| (K = CG*KH*KW).
// MAX: the float max pool (op max_pool2d, vkq/ops/pool.py) on the same windows, groups = C and
// TOC = 1, no weights: y = the largest in-input tap (padding taps are skipped, as -inf), NaN
// where one is (as ATen), exact.
// AVG: the float average pool (op avg_pool2d): the in-input taps summed in row-major order, as
// ATen sums them, divided by the output position's divisor (PyTorch's rules, made on the host:
// div[oh * OW + ow], 0 for an empty window, whose average is 0).
//! variant
//! variant RAW
//! variant MAX
//! variant AVG
#include "common.glsl"

layout(constant_id = 3) const int TOC = 4;
layout(constant_id = 4) const int TW = 4;
layout(constant_id = 5) const int KH = 3;
layout(constant_id = 6) const int KW = 3;
layout(constant_id = 7) const int SH = 1;      // stride and dilation: constants, so that a row's
layout(constant_id = 8) const int SW = 1;      // window of WIN values is loaded once into registers
layout(constant_id = 9) const int DH = 1;      // (TW + KW - 1 loads at stride 1, not TW * KW)
layout(constant_id = 10) const int DW = 1;
const int WIN = (TW - 1) * SW + (KW - 1) * DW + 1;

layout(std430, binding = 0) readonly buffer X { float x[]; };
#if defined(MAX) || defined(AVG)
#define POOL
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
#endif
#if defined(MAX)
#define FILL (uintBitsToFloat(0xff800000u))    // -inf: a tap outside the input
#elif defined(AVG)
layout(std430, binding = 2) readonly buffer Div { float div[]; };
#define FILL 0.0
#else
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 1) readonly buffer Wt4 { vec4 w4[]; };     // the same words by vec4
layout(std430, binding = 2) readonly buffer B { float bias[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
#define FILL 0.0
#endif
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, OC, OH, OW
    ivec4 pad_groups;  // ph, pw, groups, tiles per group
} p;

void main() {
    const int C = p.in_shape.y, H = p.in_shape.z, W = p.in_shape.w;
    const int OC = p.out_shape.y, OH = p.out_shape.z, OW = p.out_shape.w;
    const int ph = p.pad_groups.x, pw = p.pad_groups.y, groups = p.pad_groups.z, tpg = p.pad_groups.w;
    const int CG = C / groups, OCG = OC / groups, owb_count = (OW + TW - 1) / TW;

    int i = linear_invocation();
    if (i >= p.out_shape.x * groups * tpg * OH * owb_count) return;
    const int owb = i % owb_count;
    i /= owb_count;
    const int oh = i % OH;
    i /= OH;
    const int t = i % (groups * tpg), n = i / (groups * tpg);
    const int g = t / tpg, oc0 = g * OCG + (t % tpg) * TOC;      // first output channel of the tile
    const int jn = min(TOC, g * OCG + OCG - oc0);                 // its channels in the group
    const int ow0 = owb * TW;

    int oc[TOC];
    float acc[TOC][TW];
    [[unroll]] for (int j = 0; j < TOC; ++j) {
        oc[j] = oc0 + min(j, jn - 1);
#ifdef POOL
        const float b = FILL;
#else
        const float b = bias[oc[j]];
#endif
        [[unroll]] for (int u = 0; u < TW; ++u) acc[j][u] = b;
    }
    const int taps = CG * KH * KW;
    const int ih0 = oh * SH - ph, iw0 = ow0 * SW - pw;
    for (int c = 0; c < CG; ++c) {
        const int plane = (n * C + g * CG + c) * H;
        [[unroll]] for (int kh = 0; kh < KH; ++kh) {
            const int ih = ih0 + kh * DH;
            if (ih < 0 || ih >= H) continue;
            const int row = (plane + ih) * W;
            float xw[WIN];
            [[unroll]] for (int v = 0; v < WIN; ++v) {
                const int iw = iw0 + v;
                xw[v] = (iw >= 0 && iw < W) ? x[row + clamp(iw, 0, W - 1)] : FILL;
            }
            [[unroll]] for (int kw = 0; kw < KW; ++kw) {
#if defined(MAX)
                [[unroll]] for (int u = 0; u < TW; ++u) {     // (NaN wins, as ATen's; max() dropped it)
                    const float v = xw[u * SW + kw * DW];
                    acc[0][u] = v > acc[0][u] || isnan(v) ? v : acc[0][u];
                }
#elif defined(AVG)
                [[unroll]] for (int u = 0; u < TW; ++u) acc[0][u] += xw[u * SW + kw * DW];
#else
                const int tap = (c * KH + kh) * KW + kw;
                float wv[TOC];
#ifdef RAW
                [[unroll]] for (int j = 0; j < TOC; ++j) wv[j] = w[oc[j] * taps + tap];
#else
                const int wb = ((t * CG + c) * KH * KW + kh * KW + kw) * TOC;
                if (TOC % 4 == 0) {
                    [[unroll]] for (int q = 0; q < TOC / 4; ++q) {
                        const vec4 v = w4[wb / 4 + q];
                        [[unroll]] for (int k = 0; k < 4; ++k) wv[min(4 * q + k, TOC - 1)] = v[k];
                    }
                } else {
                    [[unroll]] for (int j = 0; j < TOC; ++j) wv[j] = w[wb + j];
                }
#endif
                [[unroll]] for (int j = 0; j < TOC; ++j)
                    [[unroll]] for (int u = 0; u < TW; ++u) acc[j][u] += xw[u * SW + kw * DW] * wv[j];
#endif
            }
        }
    }
    [[unroll]] for (int j = 0; j < TOC; ++j) {
        if (j >= jn) break;
        const int base = ((n * OC + oc0 + j) * OH + oh) * OW;
        [[unroll]] for (int u = 0; u < TW; ++u) {
            if (ow0 + u >= OW) continue;
#ifdef AVG
            const float d = div[oh * OW + ow0 + u];
            y[base + ow0 + u] = d == 0.0 ? 0.0 : acc[j][u] / d;
#else
            y[base + ow0 + u] = acc[j][u];
#endif
        }
    }
}

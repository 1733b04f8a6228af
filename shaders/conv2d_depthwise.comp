#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifndef NO_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
// conv2d_q8, depthwise kernel: groups == C == OC, output channel c reads input channel c only
// (vkq/ops/conv.py; x and y are 4W4C):
//   acc[c, oh, ow] = sum_{kh, kw} xz[c, oh*SH - ph + kh*DH, ow*SW - pw + kw*DW] * w[c, 0, kh, kw]
//   y[c, oh, ow]   = requantize(acc + bias_eff[c], m[c], s[c], out_zp, qmin, qmax)
// xz is x read as x_zp outside the image; the host folds -x_zp * sum(w[c]) into bias_eff.
//
// One invocation owns one block of 4 channels x TH x TW output positions. The 4 channels of a
// word never mix, so a tap is (x word) * (weight word) lane by lane: 4 int32 multiply-adds on
// unpacked ivec4s, exact. The (TH-1)*SH + (KH-1)*DH + 1 by (TW-1)*SW + (KW-1)*DW + 1 window of
// x words is loaded once (the columns it shares with the next tile of its row come from the next
// lane) and every word serves every tap that reads it; the G lanes of a group share the block's
// KH*KW weight words (conv_common.glsl).
//! variant
//! variant NO_SUBGROUP
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "conv_common.glsl"

layout(constant_id = 4) const int TH = 4;
layout(constant_id = 5) const int TW = 4;
layout(constant_id = 6) const int KH = 3;
layout(constant_id = 7) const int KW = 3;
layout(constant_id = 8) const int SH = 1;
layout(constant_id = 9) const int SW = 1;
layout(constant_id = 10) const int DH = 1;
layout(constant_id = 11) const int DW = 1;

const int WH = (TH - 1) * SH + (KH - 1) * DH + 1;
const int WW = (TW - 1) * SW + (KW - 1) * DW + 1;
#ifdef NO_SUBGROUP
const int OWN = WW;
#else
const int OWN_MIN = SW * TW < WW ? SW * TW : WW;
const int OWN = WW <= 2 * OWN_MIN ? OWN_MIN : WW;    // columns a lane loads
#endif
const int HALO = WW - OWN;                          // columns from the next lane (conv_common.glsl)
const int WREGS = (KH * KW + G - 1) / G;
const int PREGS = (12 + G - 1) / G;

layout(std430, binding = 0) readonly buffer X { int x[]; };
// word c4*KH*KW + kh*KW + kw: byte b = w[4*c4 + b, 0, kh, kw]
layout(std430, binding = 1) readonly buffer Wt { int w[]; };
// per channel block c4: bias_eff[4], m[4], s[4] at 12*c4
layout(std430, binding = 2) readonly buffer Chan { int chan[]; };
layout(std430, binding = 3) writeonly buffer Y { int y[]; };
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, C, OH, OW
    int ph, pw;
    int zp_word;       // x_zp in all four bytes
    int out_zp, qmin, qmax;
} p;

void main() {
    const int N = p.in_shape.x, C = p.in_shape.y, C4 = up4(C) / 4, H = p.in_shape.z, W = p.in_shape.w;
    const int OH = p.out_shape.z, OW = p.out_shape.w, W4 = up4(W) / 4, OW4 = up4(OW) / 4;
    const int tiles_w = (OW + TW - 1) / TW, tiles = tiles_w * ((OH + TH - 1) / TH);
    const int spatial_groups = (tiles + G - 1) / G;

    // group q -> (image n, channel block c4, G spatial tiles); lane -> one spatial tile
    const int q = group_index(), lane = group_lane();
    const int c4 = (q / spatial_groups) % C4;
    int n = q / (spatial_groups * C4), st = (q % spatial_groups) * G + lane;
    const bool live = n < N && st < tiles;
    n = min(n, N - 1);
    st = min(st, tiles - 1);
    const int oh0 = st / tiles_w * TH, ow0 = st % tiles_w * TW;

    int wr[WREGS];
    [[unroll]] for (int i = 0; i < WREGS; ++i) wr[i] = w[c4 * KH * KW + i * G + lane];

    // the window, clamped into the image; outside it reads x_zp
    int row_off[WH], col_off[WW];
    bool row_in[WH], col_in[WW];
    [[unroll]] for (int r = 0; r < WH; ++r) {
        const int ih = oh0 * SH - p.ph + r;
        row_in[r] = ih >= 0 && ih < H;
        row_off[r] = (n * H + clamp(ih, 0, H - 1)) * W4 * C4 * 4 + c4 * 4;
    }
    [[unroll]] for (int c = 0; c < WW; ++c) {
        const int iw = ow0 * SW - p.pw + c, iwc = clamp(iw, 0, W - 1);
        col_in[c] = iw >= 0 && iw < W;
        col_off[c] = (iwc >> 2) * C4 * 4 + (iwc & 3);
    }
    int xw[WH][WW];
    [[unroll]] for (int r = 0; r < WH; ++r)
    [[unroll]] for (int c = 0; c < OWN; ++c) {
        const int word = x[row_off[r] + col_off[c]];
        xw[r][c] = row_in[r] && col_in[c] ? word : p.zp_word;
    }
    if (HALO > 0) {
        [[unroll]] for (int r = 0; r < WH; ++r)
        [[unroll]] for (int c = OWN; c < WW; ++c) xw[r][c] = from_next_lane(xw[r][c - OWN]);
        if (lane == G - 1 || st % tiles_w == tiles_w - 1) {   // the next lane is not the right neighbour
            [[unroll]] for (int r = 0; r < WH; ++r)
            [[unroll]] for (int c = OWN; c < WW; ++c) {
                const int word = x[row_off[r] + col_off[c]];
                xw[r][c] = row_in[r] && col_in[c] ? word : p.zp_word;
            }
        }
    }
    ivec4 xv[WH][WW];
    [[unroll]] for (int r = 0; r < WH; ++r)
    [[unroll]] for (int c = 0; c < WW; ++c) xv[r][c] = unpack_int8x4(xw[r][c]);
    ivec4 acc[TH * TW];
    [[unroll]] for (int k = 0; k < TH * TW; ++k) acc[k] = ivec4(0);
    [[unroll]] for (int kh = 0; kh < KH; ++kh)
    [[unroll]] for (int kw = 0; kw < KW; ++kw) {
        const ivec4 wv = unpack_int8x4(SHARE(wr, kh * KW + kw));
        [[unroll]] for (int i = 0; i < TH; ++i)
        [[unroll]] for (int j = 0; j < TW; ++j)
            acc[i * TW + j] += xv[i * SH + kh * DH][j * SW + kw * DW] * wv;
    }

    int pr[PREGS];
    [[unroll]] for (int i = 0; i < PREGS; ++i) pr[i] = chan[c4 * 12 + i * G + lane];
    const ivec4 bias = ivec4(SHARE(pr, 0), SHARE(pr, 1), SHARE(pr, 2), SHARE(pr, 3));
    const ivec4 m = ivec4(SHARE(pr, 4), SHARE(pr, 5), SHARE(pr, 6), SHARE(pr, 7));
    const ivec4 s = ivec4(SHARE(pr, 8), SHARE(pr, 9), SHARE(pr, 10), SHARE(pr, 11));
    [[unroll]] for (int i = 0; i < TH; ++i)
    [[unroll]] for (int j = 0; j < TW; ++j) {
        const int oh = oh0 + i, ow = ow0 + j;
        const int word = requant_word(acc[i * TW + j] + bias, m, s, p.out_zp, p.qmin, p.qmax, C - 4 * c4);
        if (live && oh < OH && ow < OW)
            y[(((n * OH + oh) * OW4 + (ow >> 2)) * C4 + c4) * 4 + (ow & 3)] = word;
    }
    // 4W4C padding columns OW .. up4(OW)-1 hold 0 (a buffer starts with whatever its memory
    // held): the tile of column OW-1 writes them, in a loop kept rolled (small code)
    if (live && (OW & 3) != 0 && ow0 + TW >= OW) {
        [[dont_unroll]] for (int i = 0; i < min(TH, OH - oh0); ++i)
        [[dont_unroll]] for (int ow = OW; ow < OW4 * 4; ++ow)
            y[(((n * OH + oh0 + i) * OW4 + (ow >> 2)) * C4 + c4) * 4 + (ow & 3)] = 0;
    }
}

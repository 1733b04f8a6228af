#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifndef NO_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
// conv2d_q8, depthwise kernel: groups == C == OC, output channel c reads input channel c only
// (vkq/ops/conv.py; x and y are 4W4C):
//   acc[c, oh, ow] = sum_{kh, kw} xz[c, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW] * w[c, 0, kh, kw]
//   y[c, oh, ow]   = epilogue(acc + bias_eff[c])           (conv_epilogue.glsl)
// xz is x read as x_zp outside the image; the host folds -x_zp * sum(w[c]) into bias_eff.
//
// One invocation owns one block of 4 channels x TH rows x TB 4W4C blocks of 4 columns (from
// ow0, a multiple of 4), stored as TH * TB ivec4s (columns past OW as 0: the 4W4C padding).
// The 4 channels of a word never mix, so a tap is (x word) * (weight word) lane by lane: 4 int32
// multiply-adds on unpacked ivec4s, exact. The (TH-1)*SH + (KH-1)*DH + 1 by (4*TB-1)*SW +
// (KW-1)*DW + 1 window of x words is loaded once, its own 4W4C blocks as ivec4s and the halo
// columns mostly from the neighbouring lanes (conv_common.glsl), and every word serves every tap
// that reads it; the G lanes of a group share the block's KH*KW weight words.
//
// What limits it (lavapipe): per output word (4 channels) it does 9 ivec4 multiply-adds but also
// 1/4 ivec4 store, ~3/8 ivec4 load and 4 requantizations, and a buffer access is a loop over the
// SIMD lanes (~340 instructions an ivec4 and 8 lanes): the loads and stores are over half its
// time, the multiply-adds about a fifth. What was tried (bench/README.md has the figures):
// requantize_clamped (cheaper epilogue): kept. Streaming down row bands (each input row loaded
// once per band instead of (TH+2)/TH times): no gain. Lanes on consecutive channel blocks
// (coalesced on GPUs), every lane loading its own halo, weights and epilogue words: 1.7-2.9x
// slower, the shared loads are what pays here. fp32 multiply-adds instead of int32: no gain
// (llvmpipe emits fmul + fadd, not FMA, for GLSL fma). Other TH x TB tiles: within noise.
// llvmpipe now takes conv2d_depthwise_rows instead (its header says why); SwiftShader and GPUs
// keep this kernel.
//! variant
//! variant NO_SUBGROUP
//! variant RESIDUAL
//! variant RESIDUAL NO_SUBGROUP
//! variant LUT
//! variant LUT NO_SUBGROUP
//! variant RESIDUAL LUT
//! variant RESIDUAL LUT NO_SUBGROUP
//! variant TEXEL
//! variant NO_SUBGROUP TEXEL
//! variant RESIDUAL TEXEL
//! variant RESIDUAL NO_SUBGROUP TEXEL
//! variant LUT TEXEL
//! variant LUT NO_SUBGROUP TEXEL
//! variant RESIDUAL LUT TEXEL
//! variant RESIDUAL LUT NO_SUBGROUP TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#include "conv_common.glsl"

layout(constant_id = 4) const int TH = 4;       // output rows per invocation
layout(constant_id = 5) const int TB = 2;       // 4-column blocks per invocation
layout(constant_id = 6) const int KH = 3;
layout(constant_id = 7) const int KW = 3;
layout(constant_id = 8) const int SH = 1;
layout(constant_id = 9) const int SW = 1;
layout(constant_id = 10) const int DH = 1;
layout(constant_id = 11) const int DW = 1;
layout(constant_id = 12) const int PH = 1;
layout(constant_id = 13) const int PW = 1;
layout(constant_id = 14) const int TIES = 1;      // 0: no accumulator can tie (conv_epilogue.glsl)
layout(constant_id = 15) const int RES_TIES = 1;  // the same for the fused residual add
layout(constant_id = 16) const int FRAC = 0;      // 1: some channel's bias has a fraction (conv_epilogue.glsl)
#include "conv_epilogue.glsl"

const int TW = 4 * TB;
const int WH = (TH - 1) * SH + (KH - 1) * DH + 1;
const int WW = (TW - 1) * SW + (KW - 1) * DW + 1;
const int OWN = TW * SW;                            // own columns: window columns PW .. PW+OWN-1
const int XW = WW > PW + OWN ? WW : PW + OWN;       // columns held (own ones past WW too: halos)
#ifdef NO_SUBGROUP
const int HALO_SHUFFLE = 0;
#else
const int HALO_SHUFFLE = (PW <= OWN ? 1 : 0) * (WW - PW - OWN <= OWN ? 1 : 0);  // halos fit in neighbours' own
#endif
const int WREGS = LANE_REGS(KH * KW);
const int PREGS = LANE_REGS(16);

IVEC4_WORDS_INPUT(0, x4)      // x by block and word by word (texel.glsl)
#define X_WORD(i) WORD(x4, i)
// weight block c4 (conv_lane_words.glsl), word kh*KW + kw: byte b = w[4*c4 + b, 0, kh, kw]
// epilogue block c4: bias_eff, bound, m, shifts (4 each; conv_epilogue.glsl)
#include "conv_lane_words.glsl"
IVEC4_OUTPUT(3, y)    // texel.glsl
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, C, OH, OW
    int zp_word;       // x_zp in all four bytes
    Epilogue epi;
} p;

void main() {
    const int N = p.in_shape.x, C = p.in_shape.y, C4 = up4(C) / 4, H = p.in_shape.z, W = p.in_shape.w;
    const int OH = p.out_shape.z, OW = p.out_shape.w, W4 = up4(W) / 4, OW4 = up4(OW) / 4;
    const int tiles_w = (OW4 + TB - 1) / TB, tiles = tiles_w * ((OH + TH - 1) / TH);
    const int spatial_groups = (tiles + G - 1) / G;

    // group q -> (image n, channel block c4, G spatial tiles); lane -> one spatial tile
    const int q = group_index(), lane = group_lane();
    const int c4 = (q / spatial_groups) % C4;
    int n = q / (spatial_groups * C4), st = (q % spatial_groups) * G + lane;
    const bool live = n < N && st < tiles;
    n = min(n, N - 1);
    st = min(st, tiles - 1);
    const int oh0 = st / tiles_w * TH, ow0 = st % tiles_w * TW;
    bool left_self = HALO_SHUFFLE == 0 || lane == 0 || st % tiles_w == 0;
    bool right_self = HALO_SHUFFLE == 0 || lane == G - 1 || st % tiles_w == tiles_w - 1;

    int wr[WREGS];
    load_weights(wr, c4);

    // the window, clamped into the image; outside it reads x_zp
    int row_blk[WH], col_off[WW];     // ivec4 index of a row's block 0 (channel block c4); word offset of a column
    bool row_in[WH], col_in[WW];
    [[unroll]] for (int r = 0; r < WH; ++r) {
        const int ih = oh0 * SH - PH + r;
        row_in[r] = ih >= 0 && ih < H;
        row_blk[r] = (n * H + clamp(ih, 0, H - 1)) * W4 * C4 + c4;
    }
    [[unroll]] for (int c = 0; c < WW; ++c) {
        const int iw = ow0 * SW - PW + c, iwc = clamp(iw, 0, W - 1);
        col_in[c] = iw >= 0 && iw < W;
        col_off[c] = (iwc >> 2) * C4 * 4 + (iwc & 3);
    }
    int xw[WH][XW];
    [[unroll]] for (int r = 0; r < WH; ++r)      // own blocks
    [[unroll]] for (int b = 0; b < TB * SW; ++b) {
        const ivec4 v = LOAD4(x4, row_blk[r] + min(ow0 * SW / 4 + b, W4 - 1) * C4);
        [[unroll]] for (int e = 0; e < 4; ++e)
            xw[r][PW + 4 * b + e] = row_in[r] && ow0 * SW + 4 * b + e < W ? v[e] : p.zp_word;
    }
    if (HALO_SHUFFLE != 0) {
        [[unroll]] for (int r = 0; r < WH; ++r) {
            [[unroll]] for (int c = 0; c < PW; ++c) xw[r][c] = from_prev_lane(xw[r][c + OWN]);
            [[unroll]] for (int c = PW + OWN; c < WW; ++c) xw[r][c] = from_next_lane(xw[r][c - OWN]);
        }
    }
    if (left_self) {
        [[unroll]] for (int r = 0; r < WH; ++r)
        [[unroll]] for (int c = 0; c < min(PW, WW); ++c) {
            const int word = X_WORD(row_blk[r] * 4 + col_off[c]);
            xw[r][c] = row_in[r] && col_in[c] ? word : p.zp_word;
        }
    }
    if (right_self) {
        [[unroll]] for (int r = 0; r < WH; ++r)
        [[unroll]] for (int c = PW + OWN; c < WW; ++c) {
            const int word = X_WORD(row_blk[r] * 4 + col_off[c]);
            xw[r][c] = row_in[r] && col_in[c] ? word : p.zp_word;
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
    load_chan(pr, c4);
    const Chan4 c = CHAN4(pr, 4, 0);
    [[unroll]] for (int i = 0; i < TH; ++i)
    [[unroll]] for (int b = 0; b < TB; ++b) {
        const int oh = oh0 + i, ow4 = ow0 / 4 + b, idx = ((n * OH + oh) * OW4 + ow4) * C4 + c4;
        if (live && oh < OH && ow4 < OW4) {
            const ivec4 other = residual_block(idx);
            ivec4 words;
            [[unroll]] for (int e = 0; e < 4; ++e) {
                const int word = out_word(acc[i * TW + 4 * b + e], c, C - 4 * c4, other[e], p.epi);
                words[e] = 4 * ow4 + e < OW ? word : 0;   // columns past OW: 4W4C padding, 0
            }
            STORE4(y, idx, words);
        }
    }
}

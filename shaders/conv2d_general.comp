#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifndef NO_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#ifdef DOT
#extension GL_EXT_spirv_intrinsics : require
#endif
// conv2d_q8, general kernel: any kernel size, stride, padding, dilation and groups
// (vkq/ops/conv.py; x and y are 4W4C):
//   acc[oc, oh, ow] = sum_{c, kh, kw} xz[c, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW] * w[oc, c, kh, kw]
//   y[oc, oh, ow]   = epilogue(acc + bias_eff[oc])        (conv_epilogue.glsl)
// xz is x read as x_zp outside the image, so a padded tap adds x_zp * w, and the host folds
// -x_zp * sum(w[oc]) into bias_eff: together exactly sum (x - x_zp) * w with 0 for padding.
// Groups: w is dense over the c4 blocks [c4_start, c4_start + c4_count) of each output-channel
// tile, zero outside an output channel's group.
//
// One invocation owns TOC output channels x TH rows x one 4W4C block of 4 columns (from ow0, a
// multiple of 4), and stores them as TH * TOC/4 ivec4s (columns past OW as 0: the 4W4C padding).
// Per block of 4 input channels it loads its (TH-1)*SH + (KH-1)*DH + 1 by 3*SW + (KW-1)*DW + 1
// window of x words once: its SW own 4W4C blocks per row as ivec4s, the halo columns mostly from
// the neighbouring lanes (conv_common.glsl). Every unpacked x value serves TOC output channels
// and every kernel tap that reads it; every unpacked weight word serves TH*4 positions. The G
// lanes of a group share the tile's weight words: each lane unpacks and converts its own 1/G of
// them and the group shares the floats (4 shuffles a word instead of unpacking every word in
// every lane).
//
// ROW_LOOP (large kernels, few-channel stems; vkq/ops/conv.py:_row_loop): the whole window
// unrolled is (TH-1)*SH + KH*DH rows x KW taps x TOC channels of straight-line code per c4 block
// (7x7: ~25k multiply-adds), more than the CPU's instruction cache and registers hold; instead a
// rolled loop steps through the kernel rows, each step loading the TH input rows that kernel
// row reads and that row's KW*TOC weight words. Each input row is then loaded up to KH times
// instead of once, which the smaller code more than pays for at 7x7 (lavapipe: 1.8x faster).
//
// DOT: one dot4x8_acc per (position, channel, tap) and 4 input channels (dot4x8.glsl) on the packed
// words: the weight word holds 4 input channels of one output channel, as the x word holds 4
// channels of one position, so nothing is unpacked; int32 accumulators, no partial sums.
// Otherwise, exact fp32 accumulation: products of int8 values are integers with |x*w| <= 2^14, and a sum
// of integers stays exact in fp32 while every partial sum is below 2^24 in magnitude, whatever
// the order or fusion of the adds. CHUNK c4 blocks (4*KH*KW*CHUNK <= 2^10 products) are summed
// with fma, then converted to int32 and added to the exact total. ROW_FLUSH: kernels with more
// than 256 taps convert after every kernel row instead (4*KW <= 2^10 products).
//! variant
//! variant NO_SUBGROUP
//! variant RESIDUAL
//! variant RESIDUAL NO_SUBGROUP
//! variant LUT
//! variant LUT NO_SUBGROUP
//! variant RESIDUAL LUT
//! variant RESIDUAL LUT NO_SUBGROUP
//! variant DOT
//! variant DOT NO_SUBGROUP
//! variant DOT RESIDUAL
//! variant DOT RESIDUAL NO_SUBGROUP
//! variant DOT LUT
//! variant DOT LUT NO_SUBGROUP
//! variant DOT RESIDUAL LUT
//! variant DOT RESIDUAL LUT NO_SUBGROUP
//! variant TEXEL
//! variant NO_SUBGROUP TEXEL
//! variant RESIDUAL TEXEL
//! variant RESIDUAL NO_SUBGROUP TEXEL
//! variant LUT TEXEL
//! variant LUT NO_SUBGROUP TEXEL
//! variant RESIDUAL LUT TEXEL
//! variant RESIDUAL LUT NO_SUBGROUP TEXEL
//! variant DOT TEXEL
//! variant DOT NO_SUBGROUP TEXEL
//! variant DOT RESIDUAL TEXEL
//! variant DOT RESIDUAL NO_SUBGROUP TEXEL
//! variant DOT LUT TEXEL
//! variant DOT LUT NO_SUBGROUP TEXEL
//! variant DOT RESIDUAL LUT TEXEL
//! variant DOT RESIDUAL LUT NO_SUBGROUP TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#include "conv_common.glsl"
#ifdef DOT
#include "dot4x8.glsl"
#endif

layout(constant_id = 4) const int TOC = 16;     // output channels per invocation, a multiple of 4
layout(constant_id = 5) const int TH = 2;       // output rows per invocation
layout(constant_id = 6) const int KH = 3;
layout(constant_id = 7) const int KW = 3;
layout(constant_id = 8) const int SH = 1;
layout(constant_id = 9) const int SW = 1;
layout(constant_id = 10) const int DH = 1;
layout(constant_id = 11) const int DW = 1;
layout(constant_id = 12) const int PH = 1;
layout(constant_id = 13) const int PW = 1;
layout(constant_id = 14) const int CHUNK = 28;  // c4 blocks per exact fp32 partial sum
layout(constant_id = 15) const int ROW_FLUSH = 0;
layout(constant_id = 16) const int ONE_CHUNK = 0; // 1: all c4_count blocks in one exact partial sum
layout(constant_id = 17) const int ROW_LOOP = 0;  // 1: a rolled loop over the kernel rows (see above)
layout(constant_id = 18) const int TIES = 1;      // 0: no accumulator can tie (conv_epilogue.glsl)
layout(constant_id = 19) const int RES_TIES = 1;  // the same for the fused residual add
layout(constant_id = 20) const int FRAC = 0;      // 1: some channel's bias has a fraction (conv_epilogue.glsl)
layout(constant_id = 21) const int PAIR = 0;      // 1: channel blocks stored two at a time (TOC % 8 == 0, OC4 even)
layout(constant_id = 22) const int CH = 4;        // channels an x word holds: 4, or C < 4 (a stem's one block)
#include "conv_epilogue.glsl"

const int TW = 4;                                   // output columns per invocation: one block
const int WH = (TH - 1) * SH + (KH - 1) * DH + 1;   // input window, in rows
const int WW = (TW - 1) * SW + (KW - 1) * DW + 1;   // and in columns (words)
const int OWN = 4 * SW;                             // own columns: window columns PW .. PW+OWN-1
const int XW = WW > PW + OWN ? WW : PW + OWN;       // columns held (own ones past WW too: halos)
#ifdef NO_SUBGROUP
const int HALO_SHUFFLE = 0;
#else
const int HALO_SHUFFLE = (PW <= OWN ? 1 : 0) * (WW - PW - OWN <= OWN ? 1 : 0);  // halos fit in neighbours' own
#endif
const int KHS = ROW_LOOP != 0 ? 1 : KH;             // kernel rows per step of the row loop
const int NR = ROW_LOOP != 0 ? TH : WH;             // input rows a step holds
const int TAPW = KHS * KW * TOC;                    // weight words per step
const int WREGS = LANE_REGS(TAPW);
const int PREGS = LANE_REGS(4 * TOC);
const int NACC = TH * TW * TOC;                     // accumulator (i, j, oc) at (i*TW + j)*TOC + oc

IVEC4_WORDS_INPUT(0, x4)      // x by block and word by word (texel.glsl)
#define X_WORD(i) WORD(x4, i)
// weight block (t*c4_count + r)*KH/KHS + kh/KHS (conv_lane_words.glsl), word ((kh % KHS)*KW + kw)*TOC + o:
//   byte b = w[t*TOC + o, 4*(c4_start + r) + b, kh, kw]
// epilogue block t: bias_eff, bound, m, shifts (TOC each; conv_epilogue.glsl)
#include "conv_lane_words.glsl"
IVEC4_PAIR_OUTPUT(3, y)    // texel.glsl (PAIR: STORE4_PAIR)
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, OC, OH, OW
    int c4_count;      // c4 blocks each output-channel tile reads
    int cg, ocg;       // input and output channels per group
    int zp_word;       // x_zp in all four bytes
    Epilogue epi;
} p;

// Input row ih of the window of input-channel block c4: its own 4W4C blocks as ivec4s, the halo
// columns from the neighbouring lanes or (left_self / right_self) loaded here; outside the image
// x_zp. Every lane of the subgroup must call it (shuffles).
void load_row(out int xw[XW], int n, int c4, int ih, int ow0, int col_off[WW], bool col_in[WW],
              bool left_self, bool right_self) {
    const int C4 = up4(p.in_shape.y) / 4, H = p.in_shape.z, W = p.in_shape.w, W4 = up4(W) / 4;
    const bool row_in = ih >= 0 && ih < H;
    const int blk = (n * H + clamp(ih, 0, H - 1)) * W4 * C4 + c4;   // ivec4 index of column block 0
    [[unroll]] for (int b = 0; b < SW; ++b) {      // own blocks
        const ivec4 v = LOAD4(x4, blk + min(ow0 * SW / 4 + b, W4 - 1) * C4);
        [[unroll]] for (int e = 0; e < 4; ++e)
            xw[PW + 4 * b + e] = row_in && ow0 * SW + 4 * b + e < W ? v[e] : p.zp_word;
    }
    if (HALO_SHUFFLE != 0) {
        [[unroll]] for (int c = 0; c < PW; ++c) xw[c] = from_prev_lane(xw[c + OWN]);
        [[unroll]] for (int c = PW + OWN; c < WW; ++c) xw[c] = from_next_lane(xw[c - OWN]);
    }
    if (left_self) {
        [[unroll]] for (int c = 0; c < min(PW, WW); ++c) {
            const int word = X_WORD(blk * 4 + col_off[c]);
            xw[c] = row_in && col_in[c] ? word : p.zp_word;
        }
    }
    if (right_self) {
        [[unroll]] for (int c = PW + OWN; c < WW; ++c) {
            const int word = X_WORD(blk * 4 + col_off[c]);
            xw[c] = row_in && col_in[c] ? word : p.zp_word;
        }
    }
}

void main() {
    const int N = p.in_shape.x, C4 = up4(p.in_shape.y) / 4, H = p.in_shape.z, W = p.in_shape.w;
    const int OC = p.out_shape.y, OH = p.out_shape.z, OW = p.out_shape.w;
    const int OC4 = up4(OC) / 4, W4 = up4(W) / 4, OW4 = up4(OW) / 4;
    const int tiles_w = OW4, tiles = tiles_w * ((OH + TH - 1) / TH);
    const int spatial_groups = (tiles + G - 1) / G, oc_tiles = (OC + TOC - 1) / TOC;

    // group q -> (image n, output-channel tile t, G spatial tiles); lane -> one spatial tile
    const int q = group_index(), lane = group_lane();
    const int t = (q / spatial_groups) % oc_tiles;
    int n = q / (spatial_groups * oc_tiles), st = (q % spatial_groups) * G + lane;
    const bool live = n < N && st < tiles;
    n = min(n, N - 1);
    st = min(st, tiles - 1);
    const int oh0 = st / tiles_w * TH, ow0 = st % tiles_w * TW;
    bool left_self = HALO_SHUFFLE == 0 || lane == 0 || st % tiles_w == 0;
    bool right_self = HALO_SHUFFLE == 0 || lane == G - 1 || st % tiles_w == tiles_w - 1;

    // the window's columns, clamped into the image (outside: x_zp)
    int col_off[WW];                  // word offset of a column within its row
    bool col_in[WW];
    [[unroll]] for (int c = 0; c < WW; ++c) {
        const int iw = ow0 * SW - PW + c, iwc = clamp(iw, 0, W - 1);
        col_in[c] = iw >= 0 && iw < W;
        col_off[c] = (iwc >> 2) * C4 * 4 + (iwc & 3);
    }
    const int c4_start = min(t * TOC / p.ocg * p.cg / 4, C4 - p.c4_count);
    const int steps = p.c4_count * (KH / KHS);     // (c4 block, kernel row group) steps

    // Step s = (r4, kr): input-channel block c4_start + r4 and kernel rows kr*KHS .. +KHS-1. It
    // holds NR input rows: the whole window (KHS = KH), or the TH rows kernel row kr reads.
    int acc[NACC];
    [[unroll]] for (int k = 0; k < NACC; ++k) acc[k] = 0;
#ifndef DOT
    float part[NACC];
    [[unroll]] for (int k = 0; k < NACC; ++k) part[k] = 0.0;
    const int chunk_steps = CHUNK * (KH / KHS);
#endif
    [[dont_unroll]] for (int s = 0; s < steps; ++s) {
        const int r4 = s / (KH / KHS), kr = s % (KH / KHS);
        int xw[NR][XW];
        [[unroll]] for (int r = 0; r < NR; ++r) {
            const int wr_row = ROW_LOOP != 0 ? r * SH + kr * DH : r;      // row of the window
            load_row(xw[r], n, c4_start + r4, oh0 * SH - PH + wr_row, ow0, col_off, col_in, left_self, right_self);
        }
        int wr[WREGS];
        load_weights(wr, t * steps + s);
#ifdef DOT
        [[unroll]] for (int kh = 0; kh < KHS; ++kh)
        [[unroll]] for (int kw = 0; kw < KW; ++kw)
        [[unroll]] for (int o = 0; o < TOC; ++o) {
            const int wo = SHARE(wr, (kh * KW + kw) * TOC + o);
            [[unroll]] for (int i = 0; i < TH; ++i)
            [[unroll]] for (int j = 0; j < TW; ++j) {
                const int k = (i * TW + j) * TOC + o;
                acc[k] = dot4x8_acc(xw[ROW_LOOP != 0 ? i : i * SH + kh * DH][j * SW + kw * DW], wo, acc[k]);
            }
        }
#else
        vec4 xv[NR][WW];
        [[unroll]] for (int r = 0; r < NR; ++r)
        [[unroll]] for (int c = 0; c < WW; ++c) xv[r][c] = vec4(unpack_int8x4(xw[r][c]));
        vec4 wf[WREGS];      // each lane converts its own weight words; the group shares the floats
        [[unroll]] for (int i = 0; i < WREGS; ++i) wf[i] = vec4(unpack_int8x4(wr[i]));
        [[unroll]] for (int kh = 0; kh < KHS; ++kh) {
            [[unroll]] for (int kw = 0; kw < KW; ++kw)
            [[unroll]] for (int o = 0; o < TOC; ++o) {
                const vec4 wv = SHARE(wf, (kh * KW + kw) * TOC + o);
                [[unroll]] for (int i = 0; i < TH; ++i)
                [[unroll]] for (int j = 0; j < TW; ++j) {
                    const vec4 xx = xv[ROW_LOOP != 0 ? i : i * SH + kh * DH][j * SW + kw * DW];
                    const int k = (i * TW + j) * TOC + o;
                    // a stem's 3 channels (CH < 4): the padding channel's products are 0, skipped
                    float sum = part[k];
                    if (CH > 3) sum = fma(xx.w, wv.w, sum);
                    if (CH > 2) sum = fma(xx.z, wv.z, sum);
                    if (CH > 1) sum = fma(xx.y, wv.y, sum);
                    part[k] = fma(xx.x, wv.x, sum);
                }
            }
            if (ROW_FLUSH != 0) {
                [[unroll]] for (int k = 0; k < NACC; ++k) { acc[k] += int(part[k]); part[k] = 0.0; }
            }
        }
        if (ONE_CHUNK == 0 && ROW_FLUSH == 0 && (s + 1) % chunk_steps == 0) {
            [[unroll]] for (int k = 0; k < NACC; ++k) { acc[k] += int(part[k]); part[k] = 0.0; }
        }
#endif
    }
#ifndef DOT
    [[unroll]] for (int k = 0; k < NACC; ++k)     // ONE_CHUNK: acc was not live in the loop
        acc[k] = ONE_CHUNK != 0 ? int(part[k]) : acc[k] + int(part[k]);
#endif

    // epilogue: the tile's channel constants, then one ivec4 per 4x4 block (conv_epilogue.glsl)
    int pr[PREGS];
    load_chan(pr, t);
    [[unroll]] for (int bp = 0; bp < TOC / 4 / (1 + PAIR); ++bp) {
        const int b = bp * (1 + PAIR), oc4 = t * (TOC / 4) + b;
        // shuffled from the group's lanes, so outside the branch below (every lane takes part)
        const Chan4 chans[2] = Chan4[2](CHAN4(pr, TOC, 4 * b), CHAN4(pr, TOC, 4 * min(b + PAIR, TOC / 4 - 1)));
        [[unroll]] for (int i = 0; i < TH; ++i) {
            const int oh = oh0 + i, idx = ((n * OH + oh) * OW4 + ow0 / 4) * OC4 + oc4;
            if (live && oh < OH && oc4 < OC4) {
                ivec4 words[2];      // channel blocks oc4 (and oc4 + 1 under PAIR), consecutive ivec4s
                [[unroll]] for (int s = 0; s <= PAIR; ++s) {
                    const Chan4 c = chans[s];
                    const ivec4 other = residual_block(idx + s);
                    [[unroll]] for (int j = 0; j < TW; ++j) {
                        const int k = (i * TW + j) * TOC + 4 * (b + s);
                        const int word = out_word(ivec4(acc[k], acc[k + 1], acc[k + 2], acc[k + 3]), c, OC - 4 * (oc4 + s), other[j], p.epi);
                        words[s][j] = ow0 + j < OW ? word : 0;   // columns past OW: 4W4C padding, 0
                    }
                }
                if (PAIR != 0)
                    STORE4_PAIR(y, idx, words[0], words[PAIR]);
                else
                    STORE4(y, idx, words[0]);
            }
        }
    }
}

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
// conv2d_q8, pointwise kernel: 1x1, no padding, groups 1, any stride: a GEMM over channels
// (vkq/ops/conv.py; x and y are 4W4C):
//   acc[oc, oh, ow] = sum_c x[c, oh*SH, ow*SW] * w[oc, c]
//   y[oc, oh, ow]   = epilogue(acc + bias_eff[oc])          (conv_epilogue.glsl)
// (bias_eff = bias - x_zp * sum(w[oc]), folded on the host.)
//
// One invocation owns TB 4W4C output blocks of 4 columns (running over the blocks of the image
// row by row) x TOC output channels, and stores TB * TOC/4 ivec4s (columns past OW as 0: the
// 4W4C padding). Per block of 4 input channels it loads its TB x SW input ivec4s (stride 2: the
// two blocks holding the 4 columns it reads) and the G lanes of a group share the TOC weight
// words (conv_common.glsl): every x value serves TOC channels and every weight word 4*TB
// positions.
//   default: fp32 multiply-adds, exact as in conv2d_general.comp: CHUNK c4 blocks (4*CHUNK <=
//            2^10 products of |x*w| <= 2^14) per fp32 partial sum, then into the int32 total.
//            Each lane unpacks and converts its own 1/G of the weight words and the group
//            shares the floats (4 shuffles a word): a lane then unpacks TOC/G words instead of
//            TOC (on lavapipe 12% fewer instructions for 960->320 @7, valgrind count).
//   DOT:     one dot4x8_acc per (position, channel) and 4 input channels (dot4x8.glsl): the
//            weight word holds 4 input channels of one output channel, like the x word holds 4
//            channels of one position, so nothing is unpacked; int32 accumulators.
// Tried on lavapipe (bench/README.md): weights as shared floats (12% fewer instructions) and
// loaded lane-major as ivec4s, one partial sum without int32 accumulators live (ONE_CHUNK),
// 32/16-invocation workgroups on small maps, requantize_clamped: kept. Not kept: the rolled loop
// (C4 > 16) taking 4 or 8 blocks an iteration, 0.81-2.2x; lane groups of 16, 0.77-1.5x. Larger
// tiles (TB 4 or TOC 64: 256+ fp32 accumulators a lane spill past the L1 cache): 1.3-2x
// slower. DOT: 0.7x (llvmpipe expands OpSDotAccSat into byte extracts, multiplies and a
// saturating add). int32
// multiply-adds instead of fp32 (exact without chunks; also with x as unsigned bytes, which LLVM
// could turn into vpmaddwd): within noise on MobileNetV2's 34 pointwise layers (two interleaved
// runs: median GPU time 0.96x and 0.86x, best 0.95x and 1.13x of fp32), so fp32 stays, the rate
// GPUs without the dot product run best. The
// small-K expansions (16 -> 96) stay epilogue-bound: 16 multiply-adds an output against one
// requantization and 1/16 of an ivec4 store.
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
layout(constant_id = 5) const int TB = 2;       // 4-column blocks per invocation
layout(constant_id = 6) const int CHUNK = 256;  // c4 blocks per exact fp32 partial sum
layout(constant_id = 7) const int SH = 1;
layout(constant_id = 8) const int SW = 1;
layout(constant_id = 9) const int ONE_CHUNK = 0; // 1: all C4 blocks in one exact partial sum (C4 <= CHUNK)
layout(constant_id = 10) const int TIES = 1;      // 0: no accumulator can tie (conv_epilogue.glsl)
layout(constant_id = 11) const int RES_TIES = 1;  // the same for the fused residual add
layout(constant_id = 12) const int FRAC = 0;      // 1: some channel's bias has a fraction (conv_epilogue.glsl)
layout(constant_id = 13) const int PAIR = 0;      // 1: channel blocks stored two at a time (TOC % 8 == 0, OC4 even)
layout(constant_id = 14) const int KC4 = 0;       // > 0: C4 (<= CHUNK), its blocks unrolled (fp32 path)
#include "conv_epilogue.glsl"

const int TP = 4 * TB;                          // positions per invocation
const int WREGS = LANE_REGS(TOC);
const int PREGS = LANE_REGS(4 * TOC);

IVEC4_INPUT(0, x)
// weight block t*C4 + c4 (conv_lane_words.glsl), word o: byte b = w[t*TOC + o, 4*c4 + b]
// epilogue block t: bias_eff, bound, m, shifts (TOC each; conv_epilogue.glsl)
#include "conv_lane_words.glsl"
IVEC4_PAIR_OUTPUT(3, y)    // texel.glsl (PAIR: STORE4_PAIR)
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, OC, OH, OW
    Epilogue epi;
} p;

// one c4 block of the fp32 path: its weights converted by each lane and shared, its TP x words,
// the TP x TOC partial sums (KC4 > 0: C4 blocks unrolled, no loop to carry them through)
#define PW_STEP(c4) \
            int wr[WREGS]; \
            load_weights(wr, t * C4 + (c4)); \
            vec4 wf[WREGS]; \
            [[unroll]] for (int i = 0; i < WREGS; ++i) wf[i] = vec4(unpack_int8x4(wr[i])); \
            vec4 xv[TP]; \
            [[unroll]] for (int k = 0; k < TB; ++k) \
            [[unroll]] for (int j = 0; j < SW; ++j) { \
                const ivec4 v = LOAD4(x, xbase[k * SW + j] + (c4)); \
                [[unroll]] for (int e = 0; e < 4; ++e) \
                    if (e * SW / 4 == j) xv[4 * k + e] = vec4(unpack_int8x4(v[e * SW % 4])); \
            } \
            [[unroll]] for (int o = 0; o < TOC; ++o) { \
                const vec4 wv = SHARE(wf, o); \
                [[unroll]] for (int k = 0; k < TP; ++k) \
                    part[k * TOC + o] = fma(xv[k].x, wv.x, fma(xv[k].y, wv.y, fma(xv[k].z, wv.z, \
                                        fma(xv[k].w, wv.w, part[k * TOC + o])))); \
            }

void main() {
    const int N = p.in_shape.x, C4 = up4(p.in_shape.y) / 4, H = p.in_shape.z, W4 = up4(p.in_shape.w) / 4;
    const int OC = p.out_shape.y, OC4 = up4(OC) / 4, OH = p.out_shape.z, OW = p.out_shape.w;
    const int OW4 = up4(OW) / 4, HB = OH * OW4;
    const int block_groups = (HB + TB * G - 1) / (TB * G), oc_tiles = (OC + TOC - 1) / TOC;

    // group q -> (image n, output-channel tile t, G*TB output blocks); lane -> TB of them
    const int q = group_index(), lane = group_lane();
    const int t = (q / block_groups) % oc_tiles;
    int n = q / (block_groups * oc_tiles);
    const bool live_n = n < N;
    n = min(n, N - 1);
    const int blk0 = ((q % block_groups) * G + lane) * TB;    // output block (oh, ow4) is oh*OW4 + ow4
    int xbase[TB * SW];          // ivec4 index (c4 = 0) of the input blocks the output blocks read
    [[unroll]] for (int k = 0; k < TB; ++k) {
        const int blk = min(blk0 + k, HB - 1), oh = blk / OW4, ow4 = blk % OW4;
        [[unroll]] for (int j = 0; j < SW; ++j)
            xbase[k * SW + j] = ((n * H + oh * SH) * W4 + min(ow4 * SW + j, W4 - 1)) * C4;
    }

    int acc[TP * TOC];           // (position 4*k + e, channel o) at (4*k + e)*TOC + o
    [[unroll]] for (int k = 0; k < TP * TOC; ++k) acc[k] = 0;
#ifdef DOT
    for (int c4 = 0; c4 < C4; ++c4) {
        int wr[WREGS];
        load_weights(wr, t * C4 + c4);
        int xw[TP];
        [[unroll]] for (int k = 0; k < TB; ++k)
        [[unroll]] for (int j = 0; j < SW; ++j) {
            const ivec4 v = LOAD4(x, xbase[k * SW + j] + c4);
            [[unroll]] for (int e = 0; e < 4; ++e)           // output column e reads input word e*SW
                if (e * SW / 4 == j) xw[4 * k + e] = v[e * SW % 4];
        }
        [[unroll]] for (int o = 0; o < TOC; ++o) {
            const int wo = SHARE(wr, o);
            [[unroll]] for (int k = 0; k < TP; ++k) acc[k * TOC + o] = dot4x8_acc(xw[k], wo, acc[k * TOC + o]);
        }
    }
#else
    float part[TP * TOC];
    [[unroll]] for (int k = 0; k < TP * TOC; ++k) part[k] = 0.0;
    if (KC4 > 0) {              // small C4 (ONE_CHUNK): its blocks unrolled, no loop
        [[unroll]] for (int c4 = 0; c4 < KC4; ++c4) { PW_STEP(c4) }
    } else {
        for (int c0 = 0; c0 < C4; c0 += CHUNK) {
            const int c_end = min(c0 + CHUNK, C4);
            for (int c4 = c0; c4 < c_end; ++c4) { PW_STEP(c4) }
            if (ONE_CHUNK == 0) {
                [[unroll]] for (int k = 0; k < TP * TOC; ++k) { acc[k] += int(part[k]); part[k] = 0.0; }
            }
        }
    }
    if (ONE_CHUNK != 0) {       // then acc is not live in the loop (half the registers / stack)
        [[unroll]] for (int k = 0; k < TP * TOC; ++k) acc[k] = int(part[k]);
    }
#endif

    int pr[PREGS];
    load_chan(pr, t);
    [[unroll]] for (int bp = 0; bp < TOC / 4 / (1 + PAIR); ++bp) {
        const int b = bp * (1 + PAIR), oc4 = t * (TOC / 4) + b;
        // shuffled from the group's lanes, so outside the branch below (every lane takes part)
        const Chan4 chans[2] = Chan4[2](CHAN4(pr, TOC, 4 * b), CHAN4(pr, TOC, 4 * min(b + PAIR, TOC / 4 - 1)));
        [[unroll]] for (int k = 0; k < TB; ++k) {
            const int blk = blk0 + k, idx = (n * HB + blk) * OC4 + oc4;
            if (live_n && blk < HB && oc4 < OC4) {
                ivec4 words[2];      // channel blocks oc4 (and oc4 + 1 under PAIR), consecutive ivec4s
                [[unroll]] for (int s = 0; s <= PAIR; ++s) {
                    const Chan4 c = chans[s];
                    const ivec4 other = residual_block(idx + s);
                    [[unroll]] for (int e = 0; e < 4; ++e) {
                        const int a = (4 * k + e) * TOC + 4 * (b + s);
                        const int word = out_word(ivec4(acc[a], acc[a + 1], acc[a + 2], acc[a + 3]), c, OC - 4 * (oc4 + s), other[e], p.epi);
                        words[s][e] = 4 * (blk % OW4) + e < OW ? word : 0;   // columns past OW: 4W4C padding, 0
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

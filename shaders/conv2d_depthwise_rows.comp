#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// conv2d_q8, depthwise kernel for CPU drivers: the arithmetic of conv2d_depthwise.comp (read its
// header; vkq/ops/conv.py chooses between them), another split of the work.
//   acc[c, oh, ow] = sum_{kh, kw} xz[c, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW] * w[c, 0, kh, kw]
//   y[c, oh, ow]   = epilogue(acc + bias_eff[c])           (conv_epilogue.glsl)
//
// One invocation owns TC channel blocks (1, or 2 where C4 is even) of one output row and walks
// along it, one 4W4C output block (4 columns) a step: each step loads SW new input blocks of
// each of its WH input rows (the blocks it shares with the previous step stay in registers),
// does the taps and stores TC ivec4s (TC = 2: one 32-byte store, texel.glsl STORE4_PAIR).
// Consecutive invocations (a CPU driver's SIMD lanes) take consecutive rows of the same channel
// blocks, so every lane runs the same weights and epilogue constants. No subgroup operations:
// no lane needs another's words.
//
// Why, on llvmpipe (Mesa 22.3 at 16 lanes; bench/README.md, "Stores on llvmpipe"): its store
// to a storage buffer is a loop over the lanes in which LLVM spills the exec mask, the address
// and each 64-bit component (16 lanes: two 64-byte vectors) to the stack and reads one lane's
// element back, a read that waits on the spill (perf: the three such reads of an i64vec2 store
// held ~40% of conv2d_depthwise's samples). A 32-byte i64vec4 store runs that loop once for
// two ivec4s. conv2d_depthwise also keeps a 4 x 8 tile of outputs and a 6 x 10 window of words
// a lane (hundreds of live vectors against 32 registers: spills), and its halo columns are
// texel fetches under a branch, which llvmpipe runs for every lane whichever lanes take it.
// Here a lane holds WH x 4*NB window words and 4 accumulators a channel block, and fetches each
// input block once a row. Not kept: 2 output rows an invocation (fewer fetches, more live
// registers: 1.03-1.05x the time); on short rows, several rows walked one after another (the
// weights loaded once for more steps): as a loop the loop's masks cost 1.09x, unrolled 0.99-
// 1.09x (bench/README.md).
//! variant
//! variant RESIDUAL
//! variant LUT
//! variant RESIDUAL LUT
//! variant TEXEL
//! variant RESIDUAL TEXEL
//! variant LUT TEXEL
//! variant RESIDUAL LUT TEXEL
#define NO_SUBGROUP 1      // conv_common.glsl: G = 1, each lane loads its own weights
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#include "conv_common.glsl"

layout(constant_id = 3) const int TC = 1;        // channel blocks per invocation (1, or 2: C4 even)
layout(constant_id = 4) const int KH = 3;
layout(constant_id = 5) const int KW = 3;
layout(constant_id = 6) const int SH = 1;
layout(constant_id = 7) const int SW = 1;
layout(constant_id = 8) const int DH = 1;
layout(constant_id = 9) const int DW = 1;
layout(constant_id = 10) const int PH = 1;
layout(constant_id = 11) const int PW = 1;
layout(constant_id = 12) const int TIES = 1;      // conv_epilogue.glsl
layout(constant_id = 13) const int RES_TIES = 1;
layout(constant_id = 14) const int FRAC = 0;
#include "conv_epilogue.glsl"

const int WH = (KH - 1) * DH + 1;                  // input rows a step reads
const int WW = 3 * SW + (KW - 1) * DW + 1;         // input columns of one output block
const int PB = (PW + 3) / 4;                       // at ob = 0 the window starts in input block -PB,
const int OFF = 4 * PB - PW;                       // at its word OFF
const int NB = (OFF + WW + 3) / 4;                 // input blocks the window spans
const int KEEP = NB > SW ? NB - SW : 0;            // of them, shared with the next step
const int WREGS = LANE_REGS(KH * KW);
const int PREGS = LANE_REGS(16);

IVEC4_INPUT(0, x4)            // texel.glsl
// weight block c4 (conv_lane_words.glsl, G = 1), word kh*KW + kw: byte b = w[4*c4 + b, 0, kh, kw]
// epilogue block c4: bias_eff, bound, m, shifts (4 each; conv_epilogue.glsl)
#include "conv_lane_words.glsl"
IVEC4_PAIR_OUTPUT(3, y)   // texel.glsl: TC = 2 stores 32 bytes at a time
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, C, OH, OW
    int zp_word;       // x_zp in all four bytes
    Epilogue epi;
} p;

void main() {
    const int N = p.in_shape.x, C = p.in_shape.y, C4 = up4(C) / 4, H = p.in_shape.z, W = p.in_shape.w;
    const int OH = p.out_shape.z, OW = p.out_shape.w, W4 = up4(W) / 4, OW4 = up4(OW) / 4;
    int f = linear_invocation();
    if (f >= N * (C4 / TC) * OH) return;
    const int oh = peel(f, OH), c4 = TC * peel(f, C4 / TC), n = f;

    ivec4 wv[TC][KH * KW];
    Chan4 c[TC];
    [[unroll]] for (int t = 0; t < TC; ++t) {
        int wr[WREGS];
        load_weights(wr, c4 + t);
        [[unroll]] for (int k = 0; k < KH * KW; ++k) wv[t][k] = unpack_int8x4(wr[k]);
        int pr[PREGS];
        load_chan(pr, c4 + t);
        c[t] = CHAN4(pr, 4, 0);
    }

    // input rows (clamped into the image; a row outside it reads x_zp)
    int row_blk[WH];     // ivec4 index of the row's block 0 (channel block c4)
    bool row_in[WH];
    [[unroll]] for (int r = 0; r < WH; ++r) {
        const int ih = oh * SH - PH + r;
        row_in[r] = ih >= 0 && ih < H;
        row_blk[r] = (n * H + clamp(ih, 0, H - 1)) * W4 * C4 + c4;
    }
    const ivec4 zp = ivec4(p.zp_word);
    // blk[t][r][b]: input block fb + b of window row r, channel block c4 + t, at step ob (fb =
    // ob*SW - PB); x_zp where a column lies outside the image (4W4C padding past W holds 0)
#define FETCH(t, r, b) mix(zp, LOAD4(x4, row_blk[r] + clamp(b, 0, W4 - 1) * C4 + (t)), \
                           lessThan(uvec4(4 * (b) + ivec4(0, 1, 2, 3)), uvec4(row_in[r] ? W : 0)))
    ivec4 blk[TC][WH][NB];
    [[unroll]] for (int t = 0; t < TC; ++t)
    [[unroll]] for (int r = 0; r < WH; ++r)       // as step -1 left them
    [[unroll]] for (int b = 0; b < KEEP; ++b) blk[t][r][SW + b] = FETCH(t, r, b - PB);

    for (int ob = 0; ob < OW4; ++ob) {
        const int fb = ob * SW - PB;
        [[unroll]] for (int t = 0; t < TC; ++t)
        [[unroll]] for (int r = 0; r < WH; ++r) {
            [[unroll]] for (int b = 0; b < KEEP; ++b) blk[t][r][b] = blk[t][r][b + SW];
            [[unroll]] for (int b = KEEP; b < NB; ++b) blk[t][r][b] = FETCH(t, r, fb + b);
        }
        ivec4 acc[TC][4];
        [[unroll]] for (int t = 0; t < TC; ++t)
        [[unroll]] for (int j = 0; j < 4; ++j) acc[t][j] = ivec4(0);
        [[unroll]] for (int t = 0; t < TC; ++t)
        [[unroll]] for (int kh = 0; kh < KH; ++kh)
        [[unroll]] for (int kw = 0; kw < KW; ++kw)
        [[unroll]] for (int j = 0; j < 4; ++j) {
            const int k = OFF + j * SW + kw * DW;      // the tap's window column
            acc[t][j] += unpack_int8x4(blk[t][kh * DH][k / 4][k % 4]) * wv[t][kh * KW + kw];
        }
        const int idx = ((n * OH + oh) * OW4 + ob) * C4 + c4;
        ivec4 words[TC];
        [[unroll]] for (int t = 0; t < TC; ++t) {
            const ivec4 other = residual_block(idx + t);
            [[unroll]] for (int j = 0; j < 4; ++j) {
                const int word = out_word(acc[t][j], c[t], C - 4 * (c4 + t), other[j], p.epi);
                words[t][j] = 4 * ob + j < OW ? word : 0;   // columns past OW: 4W4C padding, 0
            }
        }
        if (TC == 2)
            STORE4_PAIR(y, idx, words[0], words[TC - 1]);
        else
            STORE4(y, idx, words[0]);
    }
}

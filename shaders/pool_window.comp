#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// 2-D max / average pool of a 4W4C int8 tensor, PyTorch's window geometry (vkq/ops/pool.py).
// The geometry is specialization constants, so the tap loops have fixed trip counts (CPU
// drivers unroll them: 2-3x faster on lavapipe than loops over computed bounds).
// One invocation per tile of TH output rows x TW output ivec4 blocks (4 output widths x 4
// channels each) of one channel block. For each output row and window row it loads the NB input
// ivec4 blocks (4 widths x 4 channels) that the tile's taps fall in (3 for 3x3 s2) and picks
// each tap's word with indices that specialization makes constant after unrolling.
// Measured (lavapipe, 3x3 s2 max pool of 1x256x128x128 = 4 MiB, CPU time against the copy
// roofline's, one interleaved run each): one int load per tap (36 per output block) 0.25 of copy
// bandwidth; whole-block loads (9 per output block) 0.35; the shapes as specialization
// constants (the index divisions become multiplies) 0.42; tiles 2 x 1 blocks 0.49 (the
// default, WINDOW_TILE), 2 x 2 0.40, 4 x 2 0.31 (registers spill). No help: unpacking each
// loaded word once and taking the row's maxima first (separable), 0.30; loading each input row
// once per tile rather than once per output row that reads it: the same on lavapipe, 1.3x
// slower on SwiftShader (which gets 3.7 -> 5.3 ms on 1x64x64x64 from all this, its one
// regression: it does not unroll and fold as lavapipe does). Average pool: 0.20 -> 0.29
// (requantize_clamped, UNIFORM constants, FILL = in_zp instead of counting the taps).
// before_store (common.glsl) on the output block: 4 MiB max pool 0.51 -> 0.45 ms, ResNet-18's
// 0.142 -> 0.125 ms (A-B-A-B).
//   taps of output o along a dim: o*stride - pad + t*dil, t in [0, k); taps outside the input
//   are read clamped and replaced by FILL, so every load is in bounds and nothing branches
//   MAX: out = max of the taps (FILL = -128: a window with no input tap gives -128, as
//        quantize(-inf) does); same qparams in and out
//   AVG: acc = sum of (q - in_zp) over the in-input taps: every tap adds q, a tap outside the
//        input adds in_zp (FILL, so that it adds 0 to the sum of q - in_zp), and the sum less
//        KH * KW * in_zp is acc; out = requantize(acc, s_in / (s_out * divisor)) as
//        requantize_clamped with the constants of each position's divisor (count_include_pad,
//        borders, divisor_override) from the host: from the table, or, where every position
//        has the same divisor (UNIFORM, the common case), from push constants
//! variant MAX
//! variant AVG
//! variant AVG UNIFORM
//! variant MAX TEXEL
//! variant AVG TEXEL
//! variant AVG UNIFORM TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int KH = 1;
layout(constant_id = 4) const int KW = 1;
layout(constant_id = 5) const int SH = 1;
layout(constant_id = 6) const int SW = 1;
layout(constant_id = 7) const int PH = 0;
layout(constant_id = 8) const int PW = 0;
layout(constant_id = 9) const int DH = 1;
layout(constant_id = 10) const int DW = 1;
layout(constant_id = 11) const int TH = 1;   // output rows per invocation
layout(constant_id = 12) const int TW = 1;   // output blocks (of 4 widths) per invocation
// The shapes too: every index below divides by them, and a division by a constant is a multiply
// (by a variable, a loop over the lanes on CPU drivers: it cost a quarter of the time).
layout(constant_id = 13) const int N = 1;
layout(constant_id = 14) const int C = 1;
layout(constant_id = 15) const int H = 1;
layout(constant_id = 16) const int W = 1;
layout(constant_id = 17) const int OH = 1;
layout(constant_id = 18) const int OW = 1;

IVEC4_INPUT(0, src)   // 4W4C blocks: 4 widths x 4 channels (texel.glsl)
IVEC4_OUTPUT(1, dst)
#if defined(AVG) && !defined(UNIFORM)
// per (oh, ow): requantize_clamped's (bound, lshift, m, rshift) for that position's divisor
IVEC4_INPUT(2, table)
#endif
layout(push_constant) uniform Params {
    ivec4 rq;          // AVG UNIFORM: requantize_clamped's (bound, lshift, m, rshift)
    int in_zp, out_zp, qmin, qmax;
    int fill;          // AVG: in_zp in all four bytes
} p;
#ifdef AVG
#define FILL p.fill
#else
const int FILL = int(0x80808080);   // four -128s
#endif

// Rows: output row oh0 + a, tap kh reads input row (oh0 + a)*SH - PH + kh*DH.
// Widths: output 4*ow40 + jj (jj < 4*TW), tap kw reads input width 4*ow40*SW + rel,
// rel = jj*SW - PW + kw*DW: word rel & 3 of block ow40*SW + (rel >> 2), and those blocks run
// ow40*SW + B0 .. + B1 (>> 2: floor division, rel may be < 0).
const int OW_T = 4 * TW;
const int B0 = (-PW) >> 2;
const int B1 = ((OW_T - 1) * SW - PW + (KW - 1) * DW) >> 2;
const int NB = B1 - B0 + 1;

void main() {
    int i = linear_invocation();
    const int C4 = (C + 3) / 4, W4 = (W + 3) / 4, OW4 = (OW + 3) / 4;
    const int OHT = (OH + TH - 1) / TH, OWT = (OW4 + TW - 1) / TW;
    if (i >= N * OHT * OWT * C4) return;
    // i = ((n*OHT + oht)*OWT + owt)*C4 + c4
    int c4 = i % C4, owt = (i / C4) % OWT, oht = (i / (C4 * OWT)) % OHT, n = i / (C4 * OWT * OHT);
    int oh0 = oht * TH, ow40 = owt * TW, w0 = 4 * ow40 * SW;

    ivec4 acc[TH][OW_T];   // acc[a][jj]: the 4 channels of output (oh0 + a, 4*ow40 + jj)
    [[unroll]] for (int a = 0; a < TH; ++a)
#ifdef AVG
        [[unroll]] for (int jj = 0; jj < OW_T; ++jj) acc[a][jj] = ivec4(0);
#else
        [[unroll]] for (int jj = 0; jj < OW_T; ++jj) acc[a][jj] = unpack_int8x4(FILL);
#endif
    [[unroll]] for (int a = 0; a < TH; ++a)
        [[unroll]] for (int kh = 0; kh < KH; ++kh) {
            int ih = (oh0 + a) * SH - PH + kh * DH;
            bool row_in = ih >= 0 && ih < H;
            int row = (n * H + clamp(ih, 0, H - 1)) * W4;
            ivec4 blk[NB];   // loads clamped in bounds; taps outside the input become FILL below
            [[unroll]] for (int b = 0; b < NB; ++b)
                blk[b] = LOAD4(src, (row + clamp(ow40 * SW + B0 + b, 0, W4 - 1)) * C4 + c4);
            [[unroll]] for (int jj = 0; jj < OW_T; ++jj)
                [[unroll]] for (int kw = 0; kw < KW; ++kw) {
                    int rel = jj * SW - PW + kw * DW, iw = w0 + rel;
                    int word = blk[(rel >> 2) - B0][rel & 3];
                    ivec4 v = unpack_int8x4(row_in && iw >= 0 && iw < W ? word : FILL);
#ifdef AVG
                    acc[a][jj] += v;
#else
                    acc[a][jj] = max(acc[a][jj], v);
#endif
                }
        }
    [[unroll]] for (int a = 0; a < TH; ++a)
        [[unroll]] for (int b = 0; b < TW; ++b) {
            int oh = oh0 + a, ow4 = ow40 + b;
            if (oh >= OH || ow4 >= OW4) continue;
            ivec4 r;
            [[unroll]] for (int j = 0; j < 4; ++j) {   // outputs past OW are computed and masked
#ifdef AVG
#ifdef UNIFORM
                ivec4 rq = p.rq;
#else
                ivec4 rq = LOAD4(table, oh * OW + min(4 * ow4 + j, OW - 1));
#endif
                ivec4 v = acc[a][4 * b + j] - KH * KW * p.in_zp, q;
                for (int c = 0; c < 4; ++c)
                    q[c] = requantize_clamped(v[c], rq.x, rq.y, rq.z, rq.w, p.out_zp, p.qmin, p.qmax);
                r[j] = pack_int8x4(q);
#else
                r[j] = pack_int8x4(acc[a][4 * b + j]);
#endif
            }
            int o = ((n * OH + oh) * OW4 + ow4) * C4 + c4;
            STORE4(dst, o, before_store(r & block_mask(o, ivec4(C, C4, OW, OW4))));   // common.glsl
        }
}

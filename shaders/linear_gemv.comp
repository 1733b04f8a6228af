#version 450
#extension GL_GOOGLE_include_directive : require
// int8 GEMV: linear_q8 / linear_q8_fout / linear_dynamic for a few rows (the decoder's batch-1
// linear), the same arithmetic and epilogues as linear_q8.comp (see there and linear_store.glsl).
//
// With one row, linear_q8.comp's tiling (a lane owns columns, all rows of a 4-row block, and
// runs through all of K) computes 4 rows for 1 and keeps few lanes busy. Here a workgroup owns
// TN columns of one row block and its L lanes split K: lane l takes k-blocks l, l + L, ..., so
// neighbouring lanes read neighbouring 16-byte weight blocks (coalesced on GPUs), and every
// weight byte is read once per row block. Only the MR real rows of a block are computed
// (MR = min(H, 4): a 1-row x wastes nothing). The lanes' partial sums are then added up:
// subgroupAdd (the workgroup is one full subgroup), or, in the PLAIN variant (no subgroup
// operations, any L), through shared memory.
// Measured (lavapipe, 1x4096x4096, CPU time against the copy roofline's): weights streamed at
// 0.54 of copy bandwidth by linear_q8.comp, 0.82 by this (SwiftShader 1x2048x2048: 120 ->
// 21.5 ms; bench/README.md). Tried: 8 or 32 columns a workgroup (0.64, 0.77); this kernel for
// 8 or 16 rows (2 or 4 passes over the weights) is slower than the tiled GEMM there
// (8x2048x2048: 3.46 vs 2.97 ms), so it takes one 4-row block only.
//
// Per k-block a lane loads one x ivec4 (4 rows x 4 k) and TN/4 weight ivec4 (4 k x 4 columns
// each; DOT: 4 columns x 4 k, one column a word, for the integer dot product).
// COLS (CPU drivers, vkq/ops/linear.py gemv_over_columns): the lanes own columns instead, lane
// l column block nt*TN4 + l (TN = 4 L), and each runs through all of K: no cross-lane sum, and
// every lane stores its own block. Split K, a workgroup's short K loop (9 steps at K = 576) sat
// beside a 16-value subgroupAdd and an epilogue run once per column block by one lane of L
// under a mask, so llvmpipe spent ~3 us a 16-column workgroup whatever its K. Measured
// (lavapipe 512 bits, linear_dynamic, GPU time min of 30): 576x1536 268-322 -> 131-138 us,
// 576x576 164 -> 68-88, 576x192 141 -> 33-70, 1536x576 208 -> 117-226, 576x49152 7.2-9.1 ->
// 3.0-3.2 ms, 4096x4096 1.58 -> 1.60 ms (even); 32 or 64 lanes a workgroup: no faster. GPUs
// keep split K: over columns, N = 576 would be 144 lanes in all.
//! variant OUT_Q8
//! variant OUT_F32
//! variant OUT_F32 ROW_QPARAMS
//! variant OUT_Q8 PLAIN
//! variant OUT_F32 PLAIN
//! variant OUT_F32 ROW_QPARAMS PLAIN
//! variant OUT_Q8 DOT
//! variant OUT_F32 DOT
//! variant OUT_F32 ROW_QPARAMS DOT
//! variant OUT_Q8 PLAIN DOT
//! variant OUT_F32 PLAIN DOT
//! variant OUT_F32 ROW_QPARAMS PLAIN DOT
//! variant OUT_Q8 LUT
//! variant OUT_Q8 LUT PLAIN
//! variant OUT_Q8 LUT DOT
//! variant OUT_Q8 LUT PLAIN DOT
//! variant OUT_Q8 DEQUANT
//! variant OUT_Q8 DEQUANT PLAIN
//! variant OUT_Q8 DEQUANT DOT
//! variant OUT_Q8 DEQUANT PLAIN DOT
//! variant OUT_Q8 LUT DEQUANT
//! variant OUT_Q8 LUT DEQUANT PLAIN
//! variant OUT_Q8 LUT DEQUANT DOT
//! variant OUT_Q8 LUT DEQUANT PLAIN DOT
//! variant OUT_Q8 TEXEL
//! variant OUT_F32 TEXEL
//! variant OUT_F32 ROW_QPARAMS TEXEL
//! variant OUT_Q8 PLAIN TEXEL
//! variant OUT_F32 PLAIN TEXEL
//! variant OUT_F32 ROW_QPARAMS PLAIN TEXEL
//! variant OUT_Q8 DOT TEXEL
//! variant OUT_F32 DOT TEXEL
//! variant OUT_F32 ROW_QPARAMS DOT TEXEL
//! variant OUT_Q8 PLAIN DOT TEXEL
//! variant OUT_F32 PLAIN DOT TEXEL
//! variant OUT_F32 ROW_QPARAMS PLAIN DOT TEXEL
//! variant OUT_Q8 LUT TEXEL
//! variant OUT_Q8 LUT PLAIN TEXEL
//! variant OUT_Q8 LUT DOT TEXEL
//! variant OUT_Q8 LUT PLAIN DOT TEXEL
//! variant OUT_Q8 DEQUANT TEXEL
//! variant OUT_Q8 DEQUANT PLAIN TEXEL
//! variant OUT_Q8 DEQUANT DOT TEXEL
//! variant OUT_Q8 DEQUANT PLAIN DOT TEXEL
//! variant OUT_Q8 LUT DEQUANT TEXEL
//! variant OUT_Q8 LUT DEQUANT PLAIN TEXEL
//! variant OUT_Q8 LUT DEQUANT DOT TEXEL
//! variant OUT_Q8 LUT DEQUANT PLAIN DOT TEXEL
//! variant COLS OUT_Q8
//! variant COLS OUT_F32
//! variant COLS OUT_F32 ROW_QPARAMS
//! variant COLS OUT_F32 ROW_QPARAMS PARTS
//! variant COLS OUT_F32 ROW_QPARAMS GLU
//! variant COLS OUT_Q8 DOT
//! variant COLS OUT_F32 DOT
//! variant COLS OUT_F32 ROW_QPARAMS DOT
//! variant COLS OUT_F32 ROW_QPARAMS PARTS DOT
//! variant COLS OUT_F32 ROW_QPARAMS GLU DOT
//! variant COLS OUT_Q8 LUT
//! variant COLS OUT_Q8 LUT DOT
//! variant COLS OUT_Q8 DEQUANT
//! variant COLS OUT_Q8 DEQUANT DOT
//! variant COLS OUT_Q8 LUT DEQUANT
//! variant COLS OUT_Q8 LUT DEQUANT DOT
//! variant COLS OUT_Q8 TEXEL
//! variant COLS OUT_F32 TEXEL
//! variant COLS OUT_F32 ROW_QPARAMS TEXEL
//! variant COLS OUT_F32 ROW_QPARAMS PARTS TEXEL
//! variant COLS OUT_F32 ROW_QPARAMS GLU TEXEL
//! variant COLS OUT_Q8 DOT TEXEL
//! variant COLS OUT_F32 DOT TEXEL
//! variant COLS OUT_F32 ROW_QPARAMS DOT TEXEL
//! variant COLS OUT_F32 ROW_QPARAMS PARTS DOT TEXEL
//! variant COLS OUT_F32 ROW_QPARAMS GLU DOT TEXEL
//! variant COLS OUT_Q8 LUT TEXEL
//! variant COLS OUT_Q8 LUT DOT TEXEL
//! variant COLS OUT_Q8 DEQUANT TEXEL
//! variant COLS OUT_Q8 DEQUANT DOT TEXEL
//! variant COLS OUT_Q8 LUT DEQUANT TEXEL
//! variant COLS OUT_Q8 LUT DEQUANT DOT TEXEL
#if !defined(PLAIN) && !defined(COLS)
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#ifdef ROW_QPARAMS
#include "float_math.glsl"
#endif
#ifdef DOT
#include "dot4x8.glsl"
#endif

layout(constant_id = 3) const int MR = 4;     // rows computed in each 4-row block: min(H, 4)
layout(constant_id = 4) const int TN = 16;    // columns per workgroup, a multiple of 4
const int TN4 = TN / 4;
const int L = int(gl_WorkGroupSize.x);        // lanes splitting K (= the subgroup size unless PLAIN)

// x: 4H4W, ivec4 (rb*K4 + kb) = rows 4rb..4rb+3 (one per int32) x k 4kb..4kb+3 (one per byte)
IVEC4_INPUT(0, x)   // texel.glsl
// w: vkq/ops/linear.py:pack_weight(w, TN, L): N padded to NT*TN, K to K4w = a multiple of L
//    blocks, zeros; ivec4 ((nt*K4w + kb)*TN4 + j) = k 4kb..+3 x n nt*TN + 4j..+3
//    (int32 i = k, byte b = n; DOT: int32 b = n, byte i = k)
IVEC4_INPUT(1, w)
IVEC4_INPUT(2, chan)   // as in linear_q8.comp
#if defined(OUT_Q8) && !defined(DEQUANT)
IVEC4_OUTPUT(3, out_q)   // texel.glsl
#else
layout(std430, binding = 3) writeonly buffer Out { float out_f[]; };
#endif
#ifdef ROW_QPARAMS
layout(std430, binding = 4) readonly buffer RowQ { vec2 rowq[]; };
layout(std430, binding = 5) readonly buffer Other { float other_f[]; };  // linear_store.glsl's epilogue
layout(constant_id = 5) const int EPI = 0;
#endif

layout(push_constant) uniform Params {
    int RB;   // row blocks of x
    int H;    // rows of each batch matrix
    int K4;   // k blocks of x
    int N;    // output columns
    int NT;   // column tiles: ceil(N / TN)
    int out_zp, qmin, qmax;
    float deq_scale;   // DEQUANT
    int deq_zp;
} p;

#ifdef PARTS
// COLS over the linears that read one quantized row (a layer's q, k, v: vkq/ops/linear_parts.py):
// part 0's p.N columns at binding 3, part 1's N1 at 6, part 2's N2 at 7; the weights and column
// constants are the parts' own, one after another, each padded to whole column tiles
layout(constant_id = 6) const int N1 = 0;
layout(constant_id = 7) const int N2 = 0;
layout(std430, binding = 6) writeonly buffer Out1 { float out_f1[]; };
layout(std430, binding = 7) writeonly buffer Out2 { float out_f2[]; };
int cur_part = 0, part_n = 0;   // the column tile's part and its columns (main, before store_block)
#define STORE_N part_n
#define STORE_F(i, v) { if (cur_part == 0) out_f[i] = (v); else if (cur_part == 1) out_f1[i] = (v); else out_f2[i] = (v); }
#endif
#ifdef GLU
// COLS over an MLP's gate and up projections of one quantized row (vkq/ops/linear_parts.py): a
// lane owns column block nb of both (the weights and column constants: the gate's tiles, then
// the up's, gl_NumWorkGroups.x tiles each); it stores gate = silu(gate's linear) at binding 6,
// then out = up's linear * that gate value, read back from its own store (binding 3): the
// two linear_dynamic nodes' epilogues, in one dispatch
layout(std430, binding = 6) buffer OutGate { float out_g[]; };
int glu_epi = 1;   // 1 while the gate block is stored, then 3
#define EPI_NOW glu_epi
#define OTHER(i) out_g[i]
#define STORE_N p.N
#define STORE_F(i, v) { if (glu_epi == 1) out_g[i] = (v); else out_f[i] = (v); }
#endif
#include "linear_store.glsl"

#ifdef PLAIN
shared ivec4 part[MR * TN4][L];
#endif

void main() {
    int lane = int(gl_LocalInvocationID.x);
    int nt = int(gl_WorkGroupID.x), rb = int(gl_WorkGroupID.y);
    int K4w = (p.K4 + L - 1) / L * L;
    int wbase = nt * K4w * TN4, xbase = rb * p.K4;

#ifdef COLS
    // lanes over columns: lane l owns column block nt*TN4 + l (TN4 == L) and runs through all of
    // K; neighbouring lanes read neighbouring 16-byte blocks at each k-block; no cross-lane sum
    int nb = nt * TN4 + lane, wcols = nt * p.K4 * TN4;   // (w packed with K4w = K4: kstep 1)
#ifdef GLU
    const int NP = 2, up_tiles = int(gl_NumWorkGroups.x);   // the gate's tiles, then the up's
#else
    const int NP = 1, up_tiles = 0;
#endif
    ivec4 acc[MR], acc2[MR];   // acc2: GLU's up
    [[unroll]] for (int r = 0; r < MR; ++r) acc[r] = acc2[r] = ivec4(0);
    for (int kb = 0; kb < p.K4; ++kb) {
        ivec4 xb = LOAD4(x, xbase + kb);
        [[unroll]] for (int pp = 0; pp < NP; ++pp) {
            ivec4 word = LOAD4(w, wcols + pp * up_tiles * p.K4 * TN4 + kb * TN4 + lane);
            ivec4 a[MR];
            [[unroll]] for (int r = 0; r < MR; ++r) a[r] = pp == 0 ? acc[r] : acc2[r];
#ifdef DOT
            [[unroll]] for (int r = 0; r < MR; ++r)
                a[r] = ivec4(dot4x8_acc(xb[r], word.x, a[r].x), dot4x8_acc(xb[r], word.y, a[r].y),
                             dot4x8_acc(xb[r], word.z, a[r].z), dot4x8_acc(xb[r], word.w, a[r].w));
#else
            ivec4 w0 = unpack_int8x4(word.x), w1 = unpack_int8x4(word.y);
            ivec4 w2 = unpack_int8x4(word.z), w3 = unpack_int8x4(word.w);
            [[unroll]] for (int r = 0; r < MR; ++r) {
                ivec4 xs = unpack_int8x4(xb[r]);
                a[r] += xs.x * w0 + xs.y * w1 + xs.z * w2 + xs.w * w3;
            }
#endif
            [[unroll]] for (int r = 0; r < MR; ++r) {
                if (pp == 0) acc[r] = a[r]; else acc2[r] = a[r];
            }
        }
    }
    ivec4 blk[4] = ivec4[4](ivec4(0), ivec4(0), ivec4(0), ivec4(0));
    [[unroll]] for (int r = 0; r < MR; ++r) blk[r] = acc[r];
#ifdef PARTS
    int t0 = (p.N + TN - 1) / TN, t1 = (N1 + TN - 1) / TN;
    cur_part = nt < t0 ? 0 : nt < t0 + t1 ? 1 : 2;
    part_n = cur_part == 0 ? p.N : cur_part == 1 ? N1 : N2;
    int nbl = (nt - (cur_part == 0 ? 0 : cur_part == 1 ? t0 : t0 + t1)) * TN4 + lane;   // in the part's columns
    if (nbl >= up4(part_n) / 4) return;
    store_block(rb, nbl, blk, chan_block(nb));
#else
    if (nb >= up4(p.N) / 4) return;
    store_block(rb, nb, blk, chan_block(nb));
#ifdef GLU
    glu_epi = 3;
    [[unroll]] for (int r = 0; r < MR; ++r) blk[r] = acc2[r];
    store_block(rb, nb, blk, chan_block(nb + up_tiles * TN4));
#endif
#endif
#else
    ivec4 acc[MR][TN4];   // acc[r][j] = row 4rb + r, columns nt*TN + 4j .. +3
    [[unroll]] for (int r = 0; r < MR; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) acc[r][j] = ivec4(0);

    // every lane runs K4w / L steps; k-blocks past K re-read x's last block (w is 0 there)
    for (int kb = lane; kb < K4w; kb += L) {
        ivec4 xb = LOAD4(x, xbase + min(kb, p.K4 - 1));
        [[unroll]] for (int j = 0; j < TN4; ++j) {
            ivec4 word = LOAD4(w, wbase + kb * TN4 + j);
#ifdef DOT
            [[unroll]] for (int r = 0; r < MR; ++r)
                acc[r][j] = ivec4(dot4x8_acc(xb[r], word.x, acc[r][j].x), dot4x8_acc(xb[r], word.y, acc[r][j].y),
                                  dot4x8_acc(xb[r], word.z, acc[r][j].z), dot4x8_acc(xb[r], word.w, acc[r][j].w));
#else
            ivec4 w0 = unpack_int8x4(word.x), w1 = unpack_int8x4(word.y);
            ivec4 w2 = unpack_int8x4(word.z), w3 = unpack_int8x4(word.w);
            [[unroll]] for (int r = 0; r < MR; ++r) {
                ivec4 xs = unpack_int8x4(xb[r]);
                acc[r][j] += xs.x * w0 + xs.y * w1 + xs.z * w2 + xs.w * w3;
            }
#endif
        }
    }

    // add up the lanes' partial sums; lane j then writes column block j (j < TN4)
#ifdef PLAIN
    [[unroll]] for (int r = 0; r < MR; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) part[r * TN4 + j][lane] = acc[r][j];
    barrier();
    if (lane >= TN4) return;
    int nb = nt * TN4 + lane;
    if (nb >= up4(p.N) / 4) return;
    ivec4 blk[4] = ivec4[4](ivec4(0), ivec4(0), ivec4(0), ivec4(0));
    for (int r = 0; r < MR; ++r)
        for (int l = 0; l < L; ++l) blk[r] += part[r * TN4 + lane][l];
    store_block(rb, nb, blk, chan_block(nb));
#else
    [[unroll]] for (int r = 0; r < MR; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) acc[r][j] = subgroupAdd(acc[r][j]);
    [[unroll]] for (int j = 0; j < TN4; ++j) {
        int nb = nt * TN4 + j;
        if (lane != j % L || nb >= up4(p.N) / 4) continue;
        ivec4 blk[4] = ivec4[4](ivec4(0), ivec4(0), ivec4(0), ivec4(0));
        [[unroll]] for (int r = 0; r < MR; ++r) blk[r] = acc[r][j];
        store_block(rb, nb, blk, chan_block(nb));
    }
#endif
#endif   // COLS
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Softmax (or log-softmax, LOG) along one dim, numerically stable (vkq/ops/float.py).
// x is viewed as (outer, D, inner): row r = (r / inner, r % inner), element j at
//   (r / inner) * D * inner + j * inner + r % inner.
// A row per invocation (ROW_LANE: CPU drivers, short rows, not MASKED), per subgroup
// (ROW_SUBGROUP) or per workgroup (include/float_workgroup.glsl):
//   m = max_j x;  e_j = exp(x_j - m);  y_j = e_j / sum_j e_j      (LOG: y_j = x_j - m - log(sum_j e_j))
// exp is exp_f32, LOG's log log_f32 (include/float_math.glsl; SwiftShader's own log(NaN) is a
// number, which made a log-softmax row holding +inf -inf where torch's is NaN); a difference
// below -87.3 (a masked score, e.g. -3.4e38 added) gives exactly 0, as float32 numpy does.
// MASKED (softmax_masked, along the last dim, inner = 1): the row is x * scale + mask first,
// each rounded once as the separate mul and add would; the mask is read through broadcast
// strides (row dims merged, rank <= 3, and one stride along the row: 1, or 0 if broadcast).
//! variant ROW_SUBGROUP
//! variant ROW_LANE
//! variant ROW_LANE TEXEL
//! variant ROW_LANE LOG
//! variant ROW_LANE LOG TEXEL
//! variant ROW_WORKGROUP
//! variant ROW_SUBGROUP LOG
//! variant ROW_WORKGROUP LOG
//! variant ROW_SUBGROUP MASKED
//! variant ROW_WORKGROUP MASKED
//! variant ROW_SUBGROUP MASKED BOOL_MASK
//! variant ROW_WORKGROUP MASKED BOOL_MASK
//! variant ROW_SUBGROUP TEXEL
//! variant ROW_WORKGROUP TEXEL
//! variant ROW_SUBGROUP LOG TEXEL
//! variant ROW_WORKGROUP LOG TEXEL
//! variant ROW_SUBGROUP MASKED TEXEL
//! variant ROW_WORKGROUP MASKED TEXEL
//! variant ROW_SUBGROUP MASKED BOOL_MASK TEXEL
//! variant ROW_WORKGROUP MASKED BOOL_MASK TEXEL
// BOOL_MASK (attention's boolean masks): the mask is int32, nonzero = attend (adds 0), 0 = -inf.
// Along the last dim (inner = 1) a lane takes blocks of 4 values (j4 = lane, lane + lanes, ...),
// keeps KEEP of them in registers between the three steps (x and the mask read once, y written
// once; longer rows re-read the rest) and sums them block by block in that order. So a row gives
// the same bits whatever its padding: masked values past a sentence add exactly 0 in the same
// places (a batch run at its own length matches the same sentence padded, tests/test_transformer).
// VEC (a specialization constant the host sets where the row stride RS % 4 == 0 and a mask row
// is whole vec4s or broadcast): the blocks are vec4 loads and stores (a row's last block past D:
// -inf in, 0 stored into the row's padding); VEC 2: the same with the mask read word by word
// (its rows do not start on vec4s: a key mask of an odd length, a causal mask); VEC 3 (no mask,
// packed rows of a length not a multiple of 4, x and y whole vec4s: Swin's windows of 49): the
// blocks are the buffer's vec4s, block j4 of a row starting at word `base` is vec4
// (base - off) / 4 + j4 with off = base % 4, so its first and last blocks hold words of the rows
// beside it: read whole (-inf outside the row), written word by word; else value by value.
// Rows of 49 (64 x 3 x 49 rows, lavapipe at 512 bits, GPU time, machine under a test run):
// value by value 21.7 ms, VEC 3 16.4 (18.7-19.6 with whole blocks stored as vec4s: see
// store_block); rows of 52 on VEC 1 9.2-10.0. ROW_LANE (a lane a row, 13 vec4s kept), same
// conditions: rows of 49 15.7 -> 5.7-6.7 ms, rows of 52 9.3 -> 2.0-2.4; VEC 3 stayed ~2.5x VEC 1
// there: each block's word-store loops run whether or not a lane stores (a vec4 store where the
// block is whole, tried: no gain, the word path still ran beside it). So under ROW_LANE a lane
// owns 4 rows of an odd length, whole vec4s (row_group). Idle machine, A-B twice: rows of 49
// 7.7 (ROW_SUBGROUP) -> 2.0 ms, rows of 52 4.8 -> 1.4.
// Attention pads its score rows to a multiple of 4 for this (vkq/ops/attention.py). On lavapipe the old
// per-value path's seven buffer accesses per value (x and mask twice, y written, read and
// written) cost more than its exp: MiniLM's attention softmax (12 x 128 x 128, CPU time) 2.94 ->
// 1.75 ms, with KEEP what a row needs (8 for 4 needed: 2.45).
// TEXEL: x and the mask through texel fetches (texel.glsl), the float bits as ints.
#include "common.glsl"
#include "float_math.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two
#define ROW_CANON
#include "float_workgroup.glsl"
#define NEG_INF (-uintBitsToFloat(0x7F800000u))
// TAIL (the host, vkq/ops/float.py _row_dispatch tail): whether a row has vec4s past its lanes'
// KEEP visits. Where it has none the loops past KEEP (PART_T exp4s each, unrolled) are dead code
// the driver's compiler removes: llvmpipe compiled them at any row length, most of a ROW_LANE
// pipeline's time (rows of 49, cold compile: 70 -> 16 s by storage buffers, 22 -> 10 s by texels).
layout(constant_id = 9) const bool TAIL = true;

IVEC4_WORDS_INPUT(0, xb)                         // texel.glsl: floats as their bits
#define X(i) intBitsToFloat(WORD(xb, i))
#define X4(i) intBitsToFloat(LOAD4(xb, i))
layout(std430, binding = 1) buffer Y { float y[]; };
VEC4_INOUT(1, y4)   // the same words by vec4 (texel.glsl: stored and read back through it)
#ifdef MASKED
IVEC4_WORDS_INPUT(2, mk)
#ifdef BOOL_MASK
float mask_of(int w) { return w != 0 ? 0.0 : NEG_INF; }
vec4 mask_of4(ivec4 w) { return mix(vec4(NEG_INF), vec4(0.0), notEqual(w, ivec4(0))); }
#else
float mask_of(int w) { return intBitsToFloat(w); }
vec4 mask_of4(ivec4 w) { return intBitsToFloat(w); }
#endif
#endif
layout(push_constant) uniform Params {
    int rows, D, inner;
    float scale;
    int mrank, mj;                       // MASKED: row dims of the mask, its stride along a row
    int mshape[3], mstride[3];
    int rs;                              // along the last dim: the words from one row to the next (>= D)
} p;

#ifdef MASKED
int mask_row(int r) {
    int off = 0;
    for (int d = p.mrank - 1; d >= 0; --d) {
        off += (r % p.mshape[d]) * p.mstride[d];
        r /= p.mshape[d];
    }
    return off;
}

float value(int base, int mbase, int j) {
    precise float s = X(base + j) * p.scale;
    precise float v = s + mask_of(WORD(mk, mbase + j * p.mj));
    return v;
}

vec4 value4(int base4, int mbase, int j4) {     // VEC 1: mbase % 4 == 0 where mj == 1 (host)
    precise vec4 s = X4(base4 + j4) * p.scale;
    vec4 m;
    if (p.mj == 0) {
        m = vec4(mask_of(WORD(mk, mbase)));
    } else if (VEC == 2) {     // mask rows not on vec4s (a (B, 1, 1, S) key mask, S odd): by word
        [[unroll]] for (int k = 0; k < 4; ++k) m[k] = mask_of(WORD(mk, mbase + min(4 * j4 + k, p.D - 1)));
    } else {
        m = mask_of4(LOAD4(mk, mbase / 4 + j4));
    }
    precise vec4 v = s + m;
    return v;
}
#else
float value(int base, int mbase, int j) { return X(base + j * p.inner); }
vec4 value4(int base4, int mbase, int j4) { return X4(base4 + j4); }
#endif

float safe_exp(float d) { return d < -87.33654 ? 0.0 : ftz(exp_f32(d)); }
vec4 safe_exp4(vec4 d) { return vec4(safe_exp(d.x), safe_exp(d.y), safe_exp(d.z), safe_exp(d.w)); }
float max4(vec4 v) { return max(max(v.x, v.y), max(v.z, v.w)); }
vec4 scaled(vec4 e, float k) {      // ftz(e k): the product may be subnormal
    precise vec4 y = e * k;
    return ftz(y);
}
vec4 log_out(vec4 v, float m, float ls) {
    precise vec4 y = (v - m) - ls;
    return y;
}

// Block j4 of a row along the last dim (inner = 1; the row starts at word `base`): values
// 4*j4 .. 4*j4 + 3, -inf past D. VEC 1, 2: one vec4 load (rows on vec4s); VEC 3: the row's words
// from the two buffer vec4s that hold them (its first vec4 starts off = base % 4 words before
// the row); else value by value. Always the row's own quads, so the canonical sum sees the same
// vec4s on every path and at any padded length (see above).
vec4 load_block(int base, int off, int mbase, int j4) {
    vec4 v;
    if (VEC == 3) {
        const int b4 = (base - off) / 4 + j4;
        const vec4 a = X4(b4), c = X4(min(b4 + 1, (p.rows * p.D + 3) / 4 - 1));   // (c past x: not used)
        v = off == 0 ? a : off == 1 ? vec4(a.yzw, c.x) : off == 2 ? vec4(a.zw, c.xy) : vec4(a.w, c.xyz);
    } else if (VEC != 0) {
        v = value4(base / 4, mbase, j4);
    } else {
        [[unroll]] for (int k = 0; k < 4; ++k) v[k] = value(base, mbase, min(4 * j4 + k, p.D - 1));   // (clamped)
    }
    return 4 * j4 + 4 <= p.D ? v : mix(vec4(NEG_INF), v, lessThan(4 * j4 + ivec4(0, 1, 2, 3), ivec4(p.D)));
}

void store_block(int base, int j4, vec4 v) {
    if (VEC == 1 || VEC == 2) {
        STORE_VEC4(y4, base / 4 + j4, v);
        return;
    }
    if (4 * j4 + 4 <= p.D) {                   // a whole block (all but a row's last)
        [[unroll]] for (int k = 0; k < 4; ++k) y[base + 4 * j4 + k] = v[k];
    } else {
        [[unroll]] for (int k = 0; k < 4; ++k)
            if (4 * j4 + k < p.D) y[base + 4 * j4 + k] = v[k];
    }
}

vec4 reload_block(int base, int j4) {     // what store_block wrote, in this same invocation
    if (VEC == 1 || VEC == 2) return RELOAD_VEC4(y4, base / 4 + j4);
    vec4 v;
    [[unroll]] for (int k = 0; k < 4; ++k) v[k] = y[base + min(4 * j4 + k, p.D - 1)];
    return v;                                 // past D: not stored
}

// Passes 1 and 2 of a row along the last dim: its max m and canonical sum of exp s (ROW_CANON:
// the lanes visit the row's vec4s as float_workgroup.glsl says); v: the lane's first KEEP
// visits (exp'd unless LOG). stash: visits past KEEP store their exp for pass 3 to read back
// (row_blocks; row_group computes them again instead).
void row_stats(int base, int off, int mbase, int D4, int l, bool stash, out vec4 v[KEEP], out float m,
               out float s) {
    const bool holds = l < PART_LANES;
    m = NEG_INF;
    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        v[i] = holds && VISIT(i) < D4 ? load_block(base, off, mbase, VISIT(i)) : vec4(NEG_INF);
        m = max(m, max4(v[i]));
    }
    if (TAIL && holds)
        for (int c = l + 16 * (KEEP / PART_T); c < D4; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t)
                if (c + t * PART_LANES < D4) m = max(m, max4(load_block(base, off, mbase, c + t * PART_LANES)));
    m = row_max(m);

    precise vec4 acc[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) acc[t] = vec4(0.0);
    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        if (holds && VISIT(i) < D4) {
            const vec4 e = safe_exp4(v[i] - m);
            acc[i % PART_T] = acc[i % PART_T] + e;
#ifndef LOG
            v[i] = e;
#endif
        }
    }
    if (TAIL && holds)
        for (int c = l + 16 * (KEEP / PART_T); c < D4; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int q = c + t * PART_LANES;
                if (q < D4) {
                    const vec4 e = safe_exp4(load_block(base, off, mbase, q) - m);
#ifndef LOG
                    if (stash) store_block(base, q, e);   // read back in pass 3 by this same invocation
#endif
                    acc[t] = acc[t] + e;
                }
            }
    s = canon_total(acc);
}

void row_blocks(int r, int l) {
    const int base = r * p.rs, off = VEC == 3 ? base & 3 : 0, D4 = (p.D + 3) / 4;
#ifdef MASKED
    const int mbase = mask_row(r);
#else
    const int mbase = 0;
#endif
    vec4 v[KEEP];
    float m, s;
    row_stats(base, off, mbase, D4, l, true, v, m, s);
    if (l >= PART_LANES) return;
#ifdef LOG
    const float ls = log_f32(s);
    [[unroll]] for (int i = 0; i < KEEP; ++i)
        if (VISIT(i) < D4) store_block(base, VISIT(i), log_out(v[i], m, ls));
    if (TAIL)
        for (int c = l + 16 * (KEEP / PART_T); c < D4; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int q = c + t * PART_LANES;
                if (q < D4) store_block(base, q, log_out(load_block(base, off, mbase, q), m, ls));
            }
#else
    const float k = recip_newton(s);          // s in [1, D]: 1 / s within 1.21 ulp, the same everywhere
    [[unroll]] for (int i = 0; i < KEEP; ++i)
        if (VISIT(i) < D4) store_block(base, VISIT(i), scaled(v[i], k));
    if (TAIL)
        for (int c = l + 16 * (KEEP / PART_T); c < D4; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int q = c + t * PART_LANES;
                if (q < D4) store_block(base, q, scaled(reload_block(base, q), k));
            }
#endif
}

#if defined(ROW_LANE) && !defined(MASKED)
float pick(vec4 a, int i) { return i == 0 ? a.x : i == 1 ? a.y : i == 2 ? a.z : a.w; }

// ROW_LANE, VEC 3, D odd (packed rows): a lane owns the 4 rows from r0 (a multiple of 4), whose
// 4 * D words are whole vec4s from a vec4 boundary. Their max and sum row by row (row_stats),
// then each of those vec4s computed again, as row_blocks computes its values, and stored whole:
// no word-by-word stores (a lane-by-lane loop each on llvmpipe, run whether or not a lane
// stores). A vec4 holds words of at most two rows (D >= 5). lavapipe at 512 bits, GPU time,
// (64, 3, 49, 49) under a test run: 5.7 (row by row) -> 3.8 ms; rows of 51 6.05 -> 3.96. Pairs of
// rows where D % 4 == 2 (2 * D words whole vec4s) gave nothing (rows of 50: 6.1 both ways).
void row_group(int r0) {
    const int RG = 4;
    vec4 m, k;                               // per row of the group: its max, and 1 / s (LOG: log s)
    [[unroll]] for (int g = 0; g < RG; ++g) {
        const int base = (r0 + g) * p.D, off = base & 3;
        vec4 v[KEEP];
        float mg, sg;
        row_stats(base, off, 0, (p.D + 3) / 4, 0, false, v, mg, sg);
        m[g] = mg;
#ifdef LOG
        k[g] = log_f32(sg);
#else
        k[g] = recip_newton(sg);
#endif
    }
    const int base4 = r0 * p.D / 4;
    int lo = 0, next = p.D;                  // the row of a vec4's first word; the word where the next row starts
    for (int j4 = 0; j4 < RG * p.D / 4; ++j4) {
        const vec4 x = X4(base4 + j4);
        const int hi = min(lo + 1, 3);
        const bvec4 upper = greaterThanEqual(4 * j4 + ivec4(0, 1, 2, 3), ivec4(next));
        const vec4 mr = mix(vec4(pick(m, lo)), vec4(pick(m, hi)), upper);
        const vec4 kr = mix(vec4(pick(k, lo)), vec4(pick(k, hi)), upper);
#ifdef LOG
        precise vec4 out4 = (x - mr) - kr;
#else
        precise vec4 e = safe_exp4(x - mr) * kr;
        const vec4 out4 = ftz(e);
#endif
        STORE_VEC4(y4, base4 + j4, out4);
        if (4 * j4 + 4 >= next) {
            lo += 1;
            next += p.D;
        }
    }
}
#endif

void row_scalar(int r, int l) {    // along a dim with inner > 1: the row's quads as row_stats visits them
    const int step = p.inner, base = (r / p.inner) * p.D * p.inner + r % p.inner, D4 = (p.D + 3) / 4;
#ifdef MASKED
    const int mbase = mask_row(r);
#else
    const int mbase = 0;
#endif
    float m = NEG_INF;
    for (int j = l; j < p.D; j += lanes()) m = max(m, value(base, mbase, j));
    m = row_max(m);

    precise vec4 acc[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) acc[t] = vec4(0.0);
    if (l < PART_LANES)
        for (int c = l; c < D4; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int q = c + t * PART_LANES;
                vec4 e = vec4(0.0);
                [[unroll]] for (int k = 0; k < 4; ++k) {
                    const int j = 4 * q + k;
                    if (j < p.D) {
                        e[k] = safe_exp(value(base, mbase, j) - m);
#ifndef LOG
                        y[base + j * step] = e[k];   // read back below by this same invocation
#endif
                    }
                }
                acc[t] = acc[t] + e;
            }
    const float s = canon_total(acc);
    if (l >= PART_LANES) return;
#ifdef LOG
    const float ls = log_f32(s);
#else
    const float kr = recip_newton(s);
#endif
    for (int c = l; c < D4; c += 16)
        [[unroll]] for (int t = 0; t < PART_T; ++t)
            [[unroll]] for (int k = 0; k < 4; ++k) {
                const int j = 4 * (c + t * PART_LANES) + k;
                if (j < p.D) {
#ifdef LOG
                    precise float o = (value(base, mbase, j) - m) - ls;
#else
                    precise float o = y[base + j * step] * kr;
                    o = ftz(o);
#endif
                    y[base + j * step] = o;
                }
            }
}

void main() {
    const int l = lane();
#if defined(ROW_LANE) && !defined(MASKED)
    if (VEC == 3 && (p.D & 1) != 0 && p.D >= 5) {   // a lane 4 rows (the host dispatches rows / 4 lanes)
        for (int t = first_row(); 4 * t < p.rows; t += row_stride()) {
            if (4 * t + 4 <= p.rows)
                row_group(4 * t);
            else                             // the last rows, fewer than 4: one by one
                for (int r = 4 * t; r < p.rows; ++r) row_blocks(r, 0);
        }
        return;
    }
#endif
    for (int r = first_row(); r < p.rows; r += row_stride()) {
        if (p.inner == 1)
            row_blocks(r, l);
        else
            row_scalar(r, l);
    }
}

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
#include "float_workgroup.glsl"
#define NEG_INF (-uintBitsToFloat(0x7F800000u))

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

float safe_exp(float d) { return d < -87.33654 ? 0.0 : exp_f32(d); }
vec4 safe_exp4(vec4 d) { return vec4(safe_exp(d.x), safe_exp(d.y), safe_exp(d.z), safe_exp(d.w)); }
float max4(vec4 v) { return max(max(v.x, v.y), max(v.z, v.w)); }

// Block j4 of a row along the last dim (inner = 1; the row starts at word `base`): values
// 4*j4 .. 4*j4 + 3, -inf past D. vec: one vec4 load; else value by value, so that a row gives
// the same bits at any padded length (see above).
vec4 load_block(int base, int off, int mbase, int j4) {
    if (VEC != 0) {      // a row's last block may pass D (rows padded to RS, a multiple of 4); VEC 3: its first may start before it
        const vec4 v = value4((base - off) / 4, mbase, j4);
        const int w0 = 4 * j4 - off;                      // the block's first value's place in the row
        return w0 >= 0 && w0 + 4 <= p.D ? v : mix(vec4(NEG_INF), v, lessThan(uvec4(w0 + ivec4(0, 1, 2, 3)), uvec4(p.D)));
    }
    vec4 v;
    [[unroll]] for (int k = 0; k < 4; ++k) {   // clamped load and a select: no branch per value
        const int j = 4 * j4 + k;
        const float x = value(base, mbase, min(j, p.D - 1));
        v[k] = j < p.D ? x : NEG_INF;
    }
    return v;
}

void store_block(int base, int off, int j4, vec4 v) {
    const int w0 = 4 * j4 - off;
    if (VEC == 3) {     // word by word, every block: a vec4 store where the block is whole made the
                        // lanes take both paths (6 store loops a block on llvmpipe, not 4): slower
        [[unroll]] for (int k = 0; k < 4; ++k)
            if (uint(w0 + k) < uint(p.D)) y[base + w0 + k] = v[k];
        return;
    }
    if (VEC != 0) {
        STORE_VEC4(y4, (base - off) / 4 + j4, v);
        return;
    }
    if (4 * j4 + 4 <= p.D) {                   // a whole block (all but a row's last)
        [[unroll]] for (int k = 0; k < 4; ++k) y[base + 4 * j4 + k] = v[k];
    } else {
        [[unroll]] for (int k = 0; k < 4; ++k)
            if (4 * j4 + k < p.D) y[base + 4 * j4 + k] = v[k];
    }
}

vec4 reload_block(int base, int off, int j4) {     // what store_block wrote, in this same invocation
    const int w0 = 4 * j4 - off;
    if (VEC == 3) {     // this row's words of the block (as stored), the others not used
        vec4 v;
        [[unroll]] for (int k = 0; k < 4; ++k) v[k] = y[base + clamp(w0 + k, max(w0, 0), min(w0 + 3, p.D - 1))];
        return v;
    }
    if (VEC != 0) return RELOAD_VEC4(y4, (base - off) / 4 + j4);
    vec4 v;
    [[unroll]] for (int k = 0; k < 4; ++k) v[k] = y[base + min(4 * j4 + k, p.D - 1)];
    return v;                                 // past D: not stored
}

// Passes 1 and 2 of a row along the last dim: its max m and sum of exp s; v: the lane's first
// KEEP blocks (exp'd unless LOG). stash: blocks past KEEP store their exp for pass 3 to read back
// (row_blocks; row_group computes them again instead).
void row_stats(int base, int off, int mbase, int D4, int l, int n, bool stash, out vec4 v[KEEP], out float m,
               out float s) {
    m = NEG_INF;
    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        const int j4 = l + i * n;
        v[i] = j4 < D4 ? load_block(base, off, mbase, j4) : vec4(NEG_INF);
        m = max(m, max4(v[i]));
    }
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n) m = max(m, max4(load_block(base, off, mbase, j4)));
    m = row_max(m);

    s = 0.0;                                 // blocks in the order j4 = l, l + n, ...
    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        if (l + i * n < D4) {
            const vec4 e = safe_exp4(v[i] - m);
            s += sum4(e);
#ifndef LOG
            v[i] = e;
#endif
        }
    }
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n) {
        const vec4 e = safe_exp4(load_block(base, off, mbase, j4) - m);
#ifndef LOG
        if (stash) store_block(base, off, j4, e);   // read back in pass 3 by this same invocation
#endif
        s += sum4(e);
    }
    s = row_sum(s);
}

void row_blocks(int r, int l, int n) {
    const int base = r * p.rs, off = VEC == 3 ? base & 3 : 0, D4 = (off + p.D + 3) / 4;
#ifdef MASKED
    const int mbase = mask_row(r);
#else
    const int mbase = 0;
#endif
    vec4 v[KEEP];
    float m, s;
    row_stats(base, off, mbase, D4, l, n, true, v, m, s);
#ifdef LOG
    const float ls = log_f32(s);
    [[unroll]] for (int i = 0; i < KEEP; ++i)
        if (l + i * n < D4) store_block(base, off, l + i * n, v[i] - m - ls);
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n) store_block(base, off, j4, load_block(base, off, mbase, j4) - m - ls);
#else
    [[unroll]] for (int i = 0; i < KEEP; ++i)
        if (l + i * n < D4) store_block(base, off, l + i * n, v[i] / s);
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n) store_block(base, off, j4, reload_block(base, off, j4) / s);
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
    vec4 m, s;                               // per row of the group
    [[unroll]] for (int g = 0; g < RG; ++g) {
        const int base = (r0 + g) * p.D, off = base & 3;
        vec4 v[KEEP];
        float mg, sg;
        row_stats(base, off, 0, (off + p.D + 3) / 4, 0, 1, false, v, mg, sg);
        m[g] = mg;
        s[g] = sg;
    }
#ifdef LOG
    const vec4 ls = vec4(log_f32(s.x), log_f32(s.y), log_f32(s.z), log_f32(s.w));
#endif
    const int base4 = r0 * p.D / 4;
    int lo = 0, next = p.D;                  // the row of a vec4's first word; the word where the next row starts
    for (int j4 = 0; j4 < RG * p.D / 4; ++j4) {
        const vec4 x = X4(base4 + j4);
        const int hi = min(lo + 1, 3);
        const bvec4 upper = greaterThanEqual(4 * j4 + ivec4(0, 1, 2, 3), ivec4(next));
        const vec4 mr = mix(vec4(pick(m, lo)), vec4(pick(m, hi)), upper);
#ifdef LOG
        STORE_VEC4(y4, base4 + j4, x - mr - mix(vec4(pick(ls, lo)), vec4(pick(ls, hi)), upper));
#else
        STORE_VEC4(y4, base4 + j4, safe_exp4(x - mr) / mix(vec4(pick(s, lo)), vec4(pick(s, hi)), upper));
#endif
        if (4 * j4 + 4 >= next) {
            lo += 1;
            next += p.D;
        }
    }
}
#endif

void row_scalar(int r, int l, int n) {    // along a dim with inner > 1
    const int step = p.inner, base = (r / p.inner) * p.D * p.inner + r % p.inner;
#ifdef MASKED
    const int mbase = mask_row(r);
#else
    const int mbase = 0;
#endif
    float m = NEG_INF;
    for (int j = l; j < p.D; j += n) m = max(m, value(base, mbase, j));
    m = row_max(m);

    float s = 0.0;
    for (int j = l; j < p.D; j += n) {
        float e = safe_exp(value(base, mbase, j) - m);
#ifndef LOG
        y[base + j * step] = e;   // read back below by this same invocation
#endif
        s += e;
    }
    s = row_sum(s);

#ifdef LOG
    float ls = log_f32(s);
    for (int j = l; j < p.D; j += n) y[base + j * step] = value(base, mbase, j) - m - ls;
#else
    for (int j = l; j < p.D; j += n) y[base + j * step] = y[base + j * step] / s;
#endif
}

void main() {
    const int l = lane(), n = lanes();
#if defined(ROW_LANE) && !defined(MASKED)
    if (VEC == 3 && (p.D & 1) != 0 && p.D >= 5) {   // a lane 4 rows (the host dispatches rows / 4 lanes)
        for (int t = first_row(); 4 * t < p.rows; t += row_stride()) {
            if (4 * t + 4 <= p.rows)
                row_group(4 * t);
            else                             // the last rows, fewer than 4: one by one
                for (int r = 4 * t; r < p.rows; ++r) row_blocks(r, 0, 1);
        }
        return;
    }
#endif
    for (int r = first_row(); r < p.rows; r += row_stride()) {
        if (p.inner == 1)
            row_blocks(r, l, n);
        else
            row_scalar(r, l, n);
    }
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Float32 reduction over some dims (vkq/ops/float.py sum, mean, vector_norm, amax, amin):
//   SUM:  S(ftz(x))      MEAN: ftz(S(ftz(x)) * 1/count)      NORM2: sqrt_f32(S(ftz(x^2)))
//   AMAX / AMIN: the largest / smallest x, NaN if any x is (torch's amax / amin): exact
// S is the canonical sum (float_exact.glsl rule 3, float_workgroup.glsl ROW_CANON; the twin:
// vkq/ops/float_math.py sum_canonical, reduce_canonical) of an output's `count` values in their
// logical order j (row-major over the reduced dims, whatever their strides): value j into
// partial j % 64, each partial summed in index order, ftz after each add, then the fixed tree.
// 1/count is a float32 from the host; sqrt_f32 is + - * alone (float_math.glsl). Bit for bit
// the reference's on every device, lane count and path. inf and NaN propagate as in torch's sums.
// The kept dims (rank <= 4, merged) index the output row-major; in-strides of kept and reduced
// dims say where the values are (index arithmetic unrolled over 4 dims: no loop).
// Who sums an output's `count` values:
//   (no ROW_ define)  one invocation (float_workgroup.glsl's ROW_LANE: its 16 partial vec4s
//                 itself): short reductions (float.py REDUCE_ROW)
//   ROW_SUBGROUP / ROW_WORKGROUP  a subgroup / workgroup (float_workgroup.glsl): long ones (a
//                 global average pool, x.sum()); the canonical sum's partials over at most 16 of
//                 its lanes (PART_LANES, PART_T), AMAX / AMIN every lanes()-th value.
//                 llvmpipe ends any invocation's loops after 65535 iterations in all (Mesa
//                 22.3's gallivm loop limiter: no error, the rest of the sum silently missing):
//                 one invocation summing a 426x342 map stopped at 21845 values. A lane of the
//                 canonical sum loops count / 64 times (a round of 16 vec4s an iteration; float.py
//                 refuses more than the device's budget).
// CONTIG: the reduced dims are one contiguous run of a multiple of 4 values starting at a
// multiple of 4 (a reduction over the last dims: F.normalize's norm, a mean over features, a
// global pool): a lane reads 4 values a load, as vec4s (TEXEL: texel fetches, texel.glsl),
// where the default reads value by value with the index arithmetic of every reduced dim.
// lavapipe (Xeon, 2 cores), GPU time, (64, 3, 64, 32) -> norm over the last dim (Swin-V2's
// cosine attention, one lane a row), A-B twice: 2.9 -> 0.31 ms; Swin-V2-T at 256, its 24
// norms: 28.8 -> 4.6 ms of GPU time.
//! variant SUM
//! variant MEAN
//! variant NORM2
//! variant SUM ROW_SUBGROUP
//! variant MEAN ROW_SUBGROUP
//! variant NORM2 ROW_SUBGROUP
//! variant SUM ROW_WORKGROUP
//! variant MEAN ROW_WORKGROUP
//! variant NORM2 ROW_WORKGROUP
//! variant AMAX
//! variant AMIN
//! variant AMAX ROW_SUBGROUP
//! variant AMIN ROW_SUBGROUP
//! variant AMAX ROW_WORKGROUP
//! variant AMIN ROW_WORKGROUP
//! variant SUM CONTIG
//! variant MEAN CONTIG
//! variant NORM2 CONTIG
//! variant SUM ROW_SUBGROUP CONTIG
//! variant MEAN ROW_SUBGROUP CONTIG
//! variant NORM2 ROW_SUBGROUP CONTIG
//! variant SUM ROW_WORKGROUP CONTIG
//! variant MEAN ROW_WORKGROUP CONTIG
//! variant NORM2 ROW_WORKGROUP CONTIG
//! variant AMAX CONTIG
//! variant AMIN CONTIG
//! variant AMAX ROW_SUBGROUP CONTIG
//! variant AMIN ROW_SUBGROUP CONTIG
//! variant AMAX ROW_WORKGROUP CONTIG
//! variant AMIN ROW_WORKGROUP CONTIG
//! variant SUM CONTIG TEXEL
//! variant MEAN CONTIG TEXEL
//! variant NORM2 CONTIG TEXEL
//! variant SUM ROW_SUBGROUP CONTIG TEXEL
//! variant MEAN ROW_SUBGROUP CONTIG TEXEL
//! variant NORM2 ROW_SUBGROUP CONTIG TEXEL
//! variant SUM ROW_WORKGROUP CONTIG TEXEL
//! variant MEAN ROW_WORKGROUP CONTIG TEXEL
//! variant NORM2 ROW_WORKGROUP CONTIG TEXEL
//! variant AMAX CONTIG TEXEL
//! variant AMIN CONTIG TEXEL
//! variant AMAX ROW_SUBGROUP CONTIG TEXEL
//! variant AMIN ROW_SUBGROUP CONTIG TEXEL
//! variant AMAX ROW_WORKGROUP CONTIG TEXEL
//! variant AMIN ROW_WORKGROUP CONTIG TEXEL
#include "common.glsl"

#if defined(AMAX) || defined(AMIN)
#define EXTREME
#else
#define ROW_CANON                  // float_workgroup.glsl's canonical row sum
#endif
#if defined(ROW_SUBGROUP) || defined(ROW_WORKGROUP)
#define ROWS
#else
#define ROW_LANE                   // an invocation an output
#endif
layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two
#include "float_workgroup.glsl"
#ifdef NORM2
#include "float_math.glsl"      // sqrt_f32 (only here: its global constants would go into every variant)
#endif

#ifdef CONTIG
#include "texel.glsl"
IVEC4_INPUT(0, x4)
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
#endif
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
    int n_out, count;            // outputs, values reduced into each
    int rk, rr;                  // ranks of the kept and of the reduced dims (the rest: size 1)
    int kshape[4], kstride[4];
    int rshape[4], rstride[4];
    float inv_count;             // MEAN: float32(1 / count)
} p;

// The ranks of the kept and the reduced (merged) dims, specialized: the index arithmetic runs
// over those dims only, and the outermost one's index needs no modulo (it is below its size), so
// one reduced dim costs no division a value. (Over all 4 dims, the size-1 ones included, a sum
// over dim 1 of (64, 64, 1024) took 64 ms on lavapipe, 50x a sum over the last dim: its
// divisions by push constants were 8 a value, and CPU drivers scalarize integer division.)
layout(constant_id = 9) const int KR = 4;
layout(constant_id = 10) const int RR = 4;

int base_of(int i) {
    int base = 0;
    [[unroll]] for (int d = 3; d >= 0; --d) {
        if (d >= KR) continue;
        base += (d == 0 ? i : i % p.kshape[d]) * p.kstride[d];
        if (d > 0) i /= p.kshape[d];
    }
    return base;
}

#ifdef CONTIG
vec4 value4(int base, int c4) {          // values 4 c4 .. 4 c4 + 3 of the run at base
    return intBitsToFloat(LOAD4(x4, (base >> 2) + c4));
}
vec4 value4(int base, int c4, bool whole) { return value4(base, c4); }
#else
float value(int base, int c) {           // reduced value c (row-major over the reduced dims)
    int off = base;
    [[unroll]] for (int d = 3; d >= 0; --d) {
        if (d >= RR) continue;
        off += (d == 0 ? c : c % p.rshape[d]) * p.rstride[d];
        if (d > 0) c /= p.rshape[d];
    }
    return x[off];
}

vec4 value4(int base, int c4, bool whole) {   // values 4 c4 .. 4 c4 + 3, zeros past count (whole: none is)
    const int j = 4 * c4, last = whole ? j + 3 : p.count - 1;
    const vec4 v = vec4(value(base, j), value(base, min(j + 1, last)), value(base, min(j + 2, last)),
                        value(base, min(j + 3, last)));
    return whole ? v : mix(v, vec4(0.0), greaterThanEqual(ivec4(j) + ivec4(0, 1, 2, 3), ivec4(p.count)));
}
#endif

#ifdef ROW_CANON
vec4 term(int base, int q, bool whole) { // what vec4 q adds: ftz(x), NORM2 ftz(x^2)
    const vec4 v = value4(base, q, whole);
#ifdef NORM2
    precise vec4 s = v * v;
    return ftz(s);
#else
    return ftz(v);
#endif
}

// The canonical sum of an output's terms (float_workgroup.glsl ROW_CANON): lane l < PART_LANES
// adds vec4 q = l + 16 c + PART_LANES t into its partial t, in increasing c. The twin pads the
// values with +0 up to whole rounds of 64 and adds those too: a partial whose last round holds
// no value of the output gets its zero made +0 here, as that add would (-0 + +0 = +0).
float canon_sum(int base) {
    const int l = lane(), Q = (p.count + 3) / 4, last_round = 16 * ((Q - 1) / 16);
    precise vec4 acc[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) acc[t] = vec4(0.0);
    if (l < PART_LANES) {
        for (int c = l; c < Q; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int q = c + t * PART_LANES;
                if (q < Q) {
                    precise vec4 a = acc[t] + term(base, q, false);
#ifdef NORM2
                    acc[t] = a;        // (sums of terms >= 0: never subnormal)
#else
                    acc[t] = ftz(a);
#endif
                }
            }
#ifndef NORM2
        [[unroll]] for (int t = 0; t < PART_T; ++t)
            acc[t] = mix(acc[t], mix(acc[t], vec4(0.0), equal(acc[t], vec4(0.0))),
                         bvec4(last_round + l + t * PART_LANES >= Q));
#endif
    }
    return canon_total(acc);
}

#ifdef ROW_LANE
// An invocation's output (count < 64: one value a partial, one round): P_q = +0 + term q, S_q,
// the tree. QS = ceil(count / 4), specialized: only its vec4s are read, and the tree's adds of
// the S_q past them, which are +0, are what such an add does to s ftz'd: -0 -> +0 (zero_plus),
// without the add (the tree of 63 adds and 16 guarded loads took 6x the compensated sum's time).
layout(constant_id = 11) const int QS = 16;

float zero_plus(float s) { return mix(s, 0.0, s == 0.0); }

// (written out, no loops: NIR left the nested loops of the tree rolled, s[] in scratch memory)
#define S_Q(q) if ((q) < QS) { precise vec4 a = vec4(0.0) + term(base, q, (q) < QS - 1); \
                               s[q] = add_ftz(add_ftz(a.x, a.y), add_ftz(a.z, a.w)); }
// LEVEL(t, h, n, m): s_t + s_t+h of a level of n live S_q, m those of the level before (32 at
// the first: every S_q is a sum): an add, or where s_t+h is +0 zero_plus, once (skipped where it was done before)
#define LEVEL(t, h, n, m) if ((t) + (h) < (n)) s[t] = add_ftz(s[t], s[(t) + (h)]); \
                          else if ((t) < (n) && (t) + 2 * (h) < (m)) s[t] = zero_plus(s[t]);
float lane_canon(int base) {
    float s[16] = float[16](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    S_Q(0) S_Q(1) S_Q(2) S_Q(3) S_Q(4) S_Q(5) S_Q(6) S_Q(7)
    S_Q(8) S_Q(9) S_Q(10) S_Q(11) S_Q(12) S_Q(13) S_Q(14) S_Q(15)      // (a -0 term adds +0)
    const int n8 = QS, n4 = min(QS, 8), n2 = min(QS, 4), n1 = min(QS, 2);   // the S_q that may not be +0
    LEVEL(0, 8, n8, 32) LEVEL(1, 8, n8, 32) LEVEL(2, 8, n8, 32) LEVEL(3, 8, n8, 32) LEVEL(4, 8, n8, 32)
    LEVEL(5, 8, n8, 32) LEVEL(6, 8, n8, 32) LEVEL(7, 8, n8, 32)
    LEVEL(0, 4, n4, n8) LEVEL(1, 4, n4, n8) LEVEL(2, 4, n4, n8) LEVEL(3, 4, n4, n8)
    LEVEL(0, 2, n2, n4) LEVEL(1, 2, n2, n4)
    LEVEL(0, 1, n1, n2)
    return s[0];
}
#endif

float finish(float s) {
#if defined(MEAN)
    precise float m = s * p.inv_count;
    return ftz(m);
#elif defined(NORM2)
    return sqrt_f32(s);
#else
    return s;
#endif
}
#endif

#ifdef EXTREME
#ifdef AMAX
const float SIGN = 1.0;
#else
const float SIGN = -1.0;     // amin = -amax(-x)
#endif
// (the largest SIGN * x of this lane's values, 1 if one was NaN else 0)
vec2 lane_extreme(int base, int first, int step) {
    float m = uintBitsToFloat(0xff800000u), nan = 0.0;
#ifdef CONTIG
    for (int c4 = first; c4 < p.count / 4; c4 += step) {
        const vec4 v = SIGN * value4(base, c4);
        if (any(isnan(v))) nan = 1.0;
        else m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
    }
#else
    for (int c0 = first; c0 < p.count; c0 += 4 * step) {
        [[unroll]] for (int k = 0; k < 4; ++k) {
            const int c = c0 + k * step;
            if (c < p.count) {
                float v = SIGN * value(base, c);
                if (isnan(v)) nan = 1.0; else m = max(m, v);
            }
        }
    }
#endif
    return vec2(m, nan);
}

float extreme(vec2 e) { return e.y > 0.0 ? uintBitsToFloat(0x7fc00000u) : SIGN * e.x; }
#endif

void main() {
#ifdef ROWS
    for (int r = first_row(); r < p.n_out; r += row_stride()) {
#ifdef EXTREME
        vec2 e = lane_extreme(base_of(r), lane(), lanes());
        e = vec2(row_max(e.x), row_max(e.y));
        if (lane() == 0) y[r] = extreme(e);
#else
        const float s = canon_sum(base_of(r));
        if (lane() == 0) y[r] = finish(s);
#endif
    }
#else
    int i = linear_invocation();
    if (i >= p.n_out) return;
#ifdef EXTREME
    y[i] = extreme(lane_extreme(base_of(i), 0, 1));
#else
    y[i] = finish(lane_canon(base_of(i)));
#endif
#endif
}

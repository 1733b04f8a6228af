#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Float32 reduction over some dims (vkq/ops/float.py sum, mean, vector_norm, amax, amin):
//   SUM:  sum x      MEAN: (sum x) / count      NORM2: sqrt(sum x^2)
//   AMAX / AMIN: the largest / smallest x, NaN if any x is (torch's amax / amin): exact
// The kept dims (rank <= 4, merged) index the output row-major; in-strides of kept and reduced
// dims say where the values are (index arithmetic unrolled over 4 dims: no loop).
// Who sums an output's `count` values:
//   (no ROW_ define)  one invocation, in row-major order: short reductions (float.py REDUCE_ROW)
//   ROW_SUBGROUP / ROW_WORKGROUP  a subgroup / workgroup (float_workgroup.glsl), each lane every
//                 lanes()-th value, then a tree: long ones (a global average pool, x.sum()).
//                 llvmpipe ends any invocation's loops after 65535 iterations in all (Mesa
//                 22.3's gallivm loop limiter: no error, the rest of the sum silently missing):
//                 one invocation summing a 426x342 map stopped at 21845 values. Spread over the
//                 lanes, a lane loops count / (4 lanes) times (float.py refuses more).
// Each sum is compensated (Kahan), `precise` so that the compiler keeps the compensation: the
// error stays ~2 eps of sum |x| (+ the tree's log2(lanes) roundings) however many values are
// reduced (the reference sums in float64). A plain sum runs beside it: where that one is inf or
// NaN (an x was) it is the lane's sum, as torch's; the compensation of an inf is inf - inf =
// NaN, which made the sum of a row holding one +inf NaN.
// CONTIG: the reduced dims are one contiguous run of a multiple of 4 values starting at a
// multiple of 4 (a reduction over the last dims: F.normalize's norm, a mean over features, a
// global pool): a lane reads 4 values a load, as vec4s (TEXEL: texel fetches, texel.glsl) with
// four compensated sums, where the default reads value by value with the index arithmetic of
// every reduced dim. lavapipe (Xeon, 2 cores), GPU time, (64, 3, 64, 32) -> norm over the last
// dim (Swin-V2's cosine attention, one lane a row), A-B twice: 2.9 -> 0.31 ms; Swin-V2-T at 256,
// its 24 norms: 28.8 -> 4.6 ms of GPU time.
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

#if defined(ROW_SUBGROUP) || defined(ROW_WORKGROUP)
#define ROWS
layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two
#include "float_workgroup.glsl"
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
} p;

// The ranks of the kept and the reduced (merged) dims, specialized: the index arithmetic runs
// over those dims only, and the outermost one's index needs no modulo (it is below its size), so
// one reduced dim costs no division a value. (Over all 4 dims, the size-1 ones included, a sum
// over dim 1 of (64, 64, 1024) took 64 ms on lavapipe, 50x a sum over the last dim: its
// divisions by push constants were 8 a value, and CPU drivers scalarize integer division.)
layout(constant_id = 7) const int KR = 4;
layout(constant_id = 8) const int RR = 4;

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
    vec4 v = intBitsToFloat(LOAD4(x4, (base >> 2) + c4));
#ifdef NORM2
    return v * v;
#else
    return v;
#endif
}

// The compensated sum of this lane's vec4s: c4 = first, first + step, ... (four running sums,
// then theirs)
float lane_sum(int base, int first, int step) {
    precise vec4 s = vec4(0.0), comp = vec4(0.0), plain = vec4(0.0);
    for (int c4 = first; c4 < p.count / 4; c4 += step) {
        const vec4 v = value4(base, c4);
        precise vec4 term = v - comp;
        precise vec4 next = s + term;
        comp = (next - s) - term;
        s = next;
        plain += v;
    }
    const float all = (plain.x + plain.y) + (plain.z + plain.w);
    precise float t = 0.0, c = 0.0;
    [[unroll]] for (int k = 0; k < 4; ++k) {
        precise float term = s[k] - c;
        precise float next = t + term;
        c = (next - t) - term;
        t = next;
    }
    precise float lost = (comp.x + comp.y) + (comp.z + comp.w);
    return isinf(all) || isnan(all) ? all : t - (c + lost);
}
#else
float value(int base, int c) {
    int off = base;
    [[unroll]] for (int d = 3; d >= 0; --d) {
        if (d >= RR) continue;
        off += (d == 0 ? c : c % p.rshape[d]) * p.rstride[d];
        if (d > 0) c /= p.rshape[d];
    }
    float v = x[off];
#ifdef NORM2
    return v * v;
#else
    return v;
#endif
}

// The compensated sum of this lane's values: c = first, first + step, ... (4 an iteration: a
// quarter of the loop iterations, see above)
float lane_sum(int base, int first, int step) {
    precise float s = 0.0, comp = 0.0, plain = 0.0;
    for (int c0 = first; c0 < p.count; c0 += 4 * step) {
        [[unroll]] for (int k = 0; k < 4; ++k) {
            const int c = c0 + k * step;
            if (c < p.count) {
                const float v = value(base, c);
                precise float term = v - comp;
                precise float next = s + term;
                comp = (next - s) - term;
                s = next;
                plain += v;
            }
        }
    }
    return isinf(plain) || isnan(plain) ? plain : s;
}
#endif

#if defined(AMAX) || defined(AMIN)
#define EXTREME
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

float finish(float s) {
#if defined(MEAN)
    return s / float(p.count);
#elif defined(NORM2)
    return sqrt(s);
#else
    return s;
#endif
}

void main() {
#ifdef ROWS
    for (int r = first_row(); r < p.n_out; r += row_stride()) {
#ifdef EXTREME
        vec2 e = lane_extreme(base_of(r), lane(), lanes());
        e = vec2(row_max(e.x), row_max(e.y));
        if (lane() == 0) y[r] = extreme(e);
#else
        float s = row_sum(lane_sum(base_of(r), lane(), lanes()));
        if (lane() == 0) y[r] = finish(s);
#endif
    }
#else
    int i = linear_invocation();
    if (i >= p.n_out) return;
#ifdef EXTREME
    y[i] = extreme(lane_extreme(base_of(i), 0, 1));
#else
    y[i] = finish(lane_sum(base_of(i), 0, 1));
#endif
#endif
}

#version 450
#extension GL_GOOGLE_include_directive : require
// Dynamic per-row quantization of float x (R, K) to 4H4W int8 (R, K) (linear_dynamic).
// The definition (vkq/ops/linear.py:quantize_rows is the numpy twin; float32 + - * only, each
// correctly rounded in Vulkan, so both agree bit for bit; `precise` forbids fused multiply-add):
//   mn = min(0, min_k x[r, k]),  mx = max(0, max_k x[r, k])
//   scale = max((mx - mn) * f32(1/255), 2^-60)
//   inv = y3, where y0 = bits(0x7EF311C7 - bits(scale)) and y_{i+1} = y_i * (2 - scale * y_i)
//   zp = clamp(-128 - roundEven(mn * inv), -128, 127)
//   q  = clamp(roundEven(x * inv) + zp, -128, 127)
// Rows R .. up4(R)-1 of the packed output are written as zeros; k past K are zero bytes.
// A row holding a NaN or an infinity: scale NaN, zero point 0, q 0 (its outputs NaN, as PT2E's
// range of it makes them; min / max would drop a NaN, it is flagged as an infinite max instead).
//
// One workgroup per 4-row block (one output ivec4 per k-block: 4 rows x 4 k); its lanes split
// K, each handling k-blocks lane, lane + L, ...; every value is a vec4 component (the 4 rows).
// The row minima and maxima are combined by subgroupMin/Max (the workgroup is one subgroup), or
// in PLAIN through shared memory. VEC4 (K % 4 == 0): x read as aligned vec4 (4 k of a row).
// Tried: one 64-lane workgroup per row with a shared-memory tree (6 barriers) and scalar loads,
// 0.52 ms for 128 x 384 on lavapipe, 40% of linear_dynamic's time there; this: see
// bench/README.md.
// NORM: the rows quantized are rms_norm(x) by the weight at binding 3 (vkq/ops/float.py rms_norm,
// bit for bit: float_layer_norm.comp's row_rms in its canonical order, the 16 vec4 partials held
// by PART_LANES lanes, PART_T each, the halving tree within a lane and then across them), computed
// from x where a value is read: the norm before the linears that share it costs no dispatch and
// no float tensor (vkq/passes/fuse_float_epilogue.py fuse_rms_norm).
//! variant
//! variant VEC4
//! variant PLAIN
//! variant PLAIN VEC4
//! variant NORM
//! variant NORM VEC4
//! variant NORM PLAIN
//! variant NORM PLAIN VEC4
#ifndef PLAIN
#extension GL_KHR_shader_subgroup_arithmetic : require
#ifdef NORM
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#endif
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "int8x4.glsl"
#ifdef NORM
#include "float_exact.glsl"
layout(constant_id = 3) const int PART_LANES = 8;   // lanes holding the 16 partials: min(L, 16)
layout(constant_id = 4) const int PART_T = 2;       // partials a lane: 16 / PART_LANES
#endif

const int L = int(gl_WorkGroupSize.x);   // lanes: the subgroup size, or any power of two (PLAIN)

#ifdef VEC4
layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };   // (R, K / 4)
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };   // (R, K)
#endif
layout(std430, binding = 1) writeonly buffer Q { ivec4 q[]; };       // 4H4W (R, K)
layout(std430, binding = 2) writeonly buffer RowQ { vec2 rowq[]; };  // (scale, zero point) per row

#ifdef NORM
layout(std430, binding = 3) readonly buffer NormW { float nw[]; };   // (K)
#endif
layout(push_constant) uniform Params {
    int R, K;
    float inv_d, eps;      // NORM: f32(1 / K), the norm's eps
} p;

#ifdef PLAIN
shared vec4 red_mn[L], red_mx[L];
#endif

// as bit patterns, so that no compiler rounds a decimal literal its own way
const uint INV_255 = 0x3B808081u;     // f32(1/255)
const uint MIN_SCALE = 0x21800000u;   // 2^-60: keeps inv and every product normal

vec4 reciprocal(vec4 s) {
    precise vec4 y = uintBitsToFloat(0x7EF311C7u - floatBitsToUint(s));
    for (int i = 0; i < 3; ++i) {
        precise vec4 sy = s * y;
        precise vec4 e = 2.0 - sy;
        precise vec4 yn = y * e;
        y = yn;
    }
    return y;
}

// x[row, 4kb .. 4kb+3] (row < R), 0 past K
vec4 load4(int row, int kb) {
#ifdef VEC4
    return x4[row * (p.K / 4) + kb];
#else
    vec4 v = vec4(0.0);
    [[unroll]] for (int t = 0; t < 4; ++t) {
        int k = 4 * kb + t;
        if (k < p.K) v[t] = x[row * p.K + k];
    }
    return v;
#endif
}

#ifdef NORM
#ifdef PLAIN
shared float red_ss[L];
#endif
vec4 rk;    // each row's 1 / rms

// rms_norm's factor of a row, on every lane: the sum of squares in float_layer_norm.comp's order
float norm_factor(int row, int lane, int K4) {
    precise vec4 acc[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) acc[t] = vec4(0.0);
    if (lane < PART_LANES)
        for (int c = lane; c < K4; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int kb = c + t * PART_LANES;
                if (kb < K4) {
                    const vec4 v = load4(row, kb);
                    precise vec4 sq = v * v;
                    acc[t] = acc[t] + ftz(sq);
                }
            }
    precise float s[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) s[t] = (acc[t].x + acc[t].y) + (acc[t].z + acc[t].w);
    [[unroll]] for (int h = PART_T / 2; h > 0; h >>= 1)
        [[unroll]] for (int t = 0; t < h; ++t) s[t] = s[t] + s[t + h];
    float v = s[0];
#ifdef PLAIN
    red_ss[lane] = v;
    barrier();
    for (int m = PART_LANES / 2; m > 0; m >>= 1) {
        if (lane < m) {
            precise float w = red_ss[lane] + red_ss[lane + m];
            red_ss[lane] = w;
        }
        barrier();
    }
    v = red_ss[0];
    barrier();
#else
    for (int m = PART_LANES / 2; m > 0; m >>= 1) {
        precise float w = v + subgroupShuffleXor(v, m);     // (lane i and lane i ^ m: the same sum)
        v = w;
    }
    v = subgroupShuffle(v, 0);
#endif
    precise float t = ftz(v * p.inv_d) + p.eps;
    return isinf(t) ? 0.0 : rsqrt_newton(t);
}

// the value quantized: x's 4 k of row r (rms_norm(x)'s under NORM), 0 past K
vec4 value4(int r, int row, int kb) {
    const vec4 v = load4(row, kb);
    vec4 w = vec4(0.0);
    [[unroll]] for (int t = 0; t < 4; ++t)
        if (4 * kb + t < p.K) w[t] = nw[4 * kb + t];
    precise vec4 a = ftz(v) * rk[r];
    precise vec4 b = ftz(a) * ftz(w);
    return ftz(b);
}
#else
vec4 value4(int r, int row, int kb) { return load4(row, kb); }
#endif

void main() {
    int rb = int(gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x);
    int lane = int(gl_LocalInvocationID.x);
    if (rb >= up4(p.R) / 4) return;   // past the grid (folded into y): the whole workgroup leaves
    int K4 = (p.K + 3) / 4;
    bvec4 real = lessThan(4 * rb + ivec4(0, 1, 2, 3), ivec4(p.R));   // padding rows write zeros
    int rows[4];
    [[unroll]] for (int r = 0; r < 4; ++r) rows[r] = min(4 * rb + r, p.R - 1);
#ifdef NORM
    rk = vec4(0.0);
    for (int r = 0; r < 4; ++r)
        if (real[r]) rk[r] = norm_factor(rows[r], lane, K4);      // (uniform: padding rows write zeros)
#endif

    // per row (component): min(0, min_k x) and max(0, max_k x); zeros past K change neither
    vec4 mn = vec4(0.0), mx = vec4(0.0);
    for (int kb = lane; kb < K4; kb += L)
        [[unroll]] for (int r = 0; r < 4; ++r) {
            vec4 v = value4(r, rows[r], kb);
            mn[r] = min(mn[r], min(min(v.x, v.y), min(v.z, v.w)));
            mx[r] = max(mx[r], max(max(v.x, v.y), max(v.z, v.w)));
            if (any(isnan(v)) || any(isinf(v))) mx[r] = uintBitsToFloat(0x7f800000u);
        }
#ifdef PLAIN
    red_mn[lane] = mn;
    red_mx[lane] = mx;
    barrier();
    for (int s = L / 2; s > 0; s >>= 1) {
        if (lane < s) {
            red_mn[lane] = min(red_mn[lane], red_mn[lane + s]);
            red_mx[lane] = max(red_mx[lane], red_mx[lane + s]);
        }
        barrier();
    }
    mn = red_mn[0];
    mx = red_mx[0];
#else
    mn = subgroupMin(mn);
    mx = subgroupMax(mx);
#endif

    precise vec4 range = mx - mn;
    precise vec4 scaled = range * uintBitsToFloat(INV_255);
    vec4 scale = max(scaled, vec4(uintBitsToFloat(MIN_SCALE)));
    vec4 inv = reciprocal(scale);
    precise vec4 lo = mn * inv;
    vec4 zp = clamp(-128.0 - roundEven(lo), -128.0, 127.0);
    const bvec4 bad = isinf(mx);
    scale = mix(scale, vec4(uintBitsToFloat(0x7fc00000u)), bad);
    zp = mix(zp, vec4(0.0), bad);
    if (lane == 0)
        for (int r = 0; r < 4; ++r)
            if (real[r]) rowq[4 * rb + r] = vec2(scale[r], zp[r]);

    for (int kb = lane; kb < K4; kb += L) {
        ivec4 words = ivec4(0);
        [[unroll]] for (int r = 0; r < 4; ++r) {
            precise vec4 xi = value4(r, rows[r], kb) * inv[r];
            precise vec4 qf = roundEven(xi) + zp[r];
            ivec4 v = ivec4(clamp(qf, -128.0, 127.0));
            v = mix(ivec4(0), v, lessThan(4 * kb + ivec4(0, 1, 2, 3), ivec4(p.K)));   // k past K: 0
            words[r] = real[r] && !bad[r] ? pack_int8x4(v) : 0;
        }
        q[rb * K4 + kb] = words;
    }
}

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
//! variant
//! variant VEC4
//! variant PLAIN
//! variant PLAIN VEC4
#ifndef PLAIN
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "int8x4.glsl"

const int L = int(gl_WorkGroupSize.x);   // lanes: the subgroup size, or any power of two (PLAIN)

#ifdef VEC4
layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };   // (R, K / 4)
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };   // (R, K)
#endif
layout(std430, binding = 1) writeonly buffer Q { ivec4 q[]; };       // 4H4W (R, K)
layout(std430, binding = 2) writeonly buffer RowQ { vec2 rowq[]; };  // (scale, zero point) per row

layout(push_constant) uniform Params {
    int R, K;
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

void main() {
    int rb = int(gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x);
    int lane = int(gl_LocalInvocationID.x);
    if (rb >= up4(p.R) / 4) return;   // past the grid (folded into y): the whole workgroup leaves
    int K4 = (p.K + 3) / 4;
    bvec4 real = lessThan(4 * rb + ivec4(0, 1, 2, 3), ivec4(p.R));   // padding rows write zeros
    int rows[4];
    [[unroll]] for (int r = 0; r < 4; ++r) rows[r] = min(4 * rb + r, p.R - 1);

    // per row (component): min(0, min_k x) and max(0, max_k x); zeros past K change neither
    vec4 mn = vec4(0.0), mx = vec4(0.0);
    for (int kb = lane; kb < K4; kb += L)
        [[unroll]] for (int r = 0; r < 4; ++r) {
            vec4 v = load4(rows[r], kb);
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
            precise vec4 xi = load4(rows[r], kb) * inv[r];
            precise vec4 qf = roundEven(xi) + zp[r];
            ivec4 v = ivec4(clamp(qf, -128.0, 127.0));
            v = mix(ivec4(0), v, lessThan(4 * kb + ivec4(0, 1, 2, 3), ivec4(p.K)));   // k past K: 0
            words[r] = real[r] && !bad[r] ? pack_int8x4(v) : 0;
        }
        q[rb * K4 + kb] = words;
    }
}

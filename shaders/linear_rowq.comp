#version 450
#extension GL_GOOGLE_include_directive : require
// Dynamic per-row quantization of float x (R, K) to 4H4W int8 (R, K), one workgroup a row.
// The definition (vkq/ops/linear.py:quantize_rows is the numpy twin; float32 + - * only, each
// correctly rounded in Vulkan, so both agree bit for bit; `precise` forbids fused multiply-add):
//   mn = min(0, min_k x[r, k]),  mx = max(0, max_k x[r, k])
//   scale = max((mx - mn) * f32(1/255), 2^-60)
//   inv = y3, where y0 = bits(0x7EF311C7 - bits(scale)) and y_{i+1} = y_i * (2 - scale * y_i)
//   zp = clamp(-128 - roundEven(mn * inv), -128, 127)
//   q  = clamp(roundEven(x * inv) + zp, -128, 127)
// Rows R .. up4(R)-1 of the packed output are written as zeros; k past K are zero bytes.
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { int q[]; };       // 4H4W (R, K)
layout(std430, binding = 2) writeonly buffer RowQ { vec2 rowq[]; }; // (scale, zero point) per row

layout(push_constant) uniform Params {
    int R, K;
} p;

shared vec2 red[LOCAL];   // (min, max) partials

// as bit patterns, so that no compiler rounds a decimal literal its own way
const uint INV_255 = 0x3B808081u;     // f32(1/255)
const uint MIN_SCALE = 0x21800000u;   // 2^-60: keeps inv and every product normal

float reciprocal(float s) {
    precise float y = uintBitsToFloat(0x7EF311C7u - floatBitsToUint(s));
    for (int i = 0; i < 3; ++i) {
        precise float sy = s * y;
        precise float e = 2.0 - sy;
        precise float yn = y * e;
        y = yn;
    }
    return y;
}

void main() {
    int r = int(gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x);
    int lid = int(gl_LocalInvocationID.x);
    if (r >= up4(p.R)) return;   // past the grid (folded into y): the whole workgroup leaves
    bool real = r < p.R;         // padding rows (up to a multiple of 4) write zeros

    vec2 mm = vec2(0.0);
    if (real)
        for (int k = lid; k < p.K; k += LOCAL) {
            float v = x[r * p.K + k];
            mm = vec2(min(mm.x, v), max(mm.y, v));
        }
    red[lid] = mm;
    barrier();
    for (int s = LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] = vec2(min(red[lid].x, red[lid + s].x), max(red[lid].y, red[lid + s].y));
        barrier();
    }
    mm = red[0];

    precise float range = mm.y - mm.x;
    precise float scaled = range * uintBitsToFloat(INV_255);
    float scale = max(scaled, uintBitsToFloat(MIN_SCALE));
    float inv = reciprocal(scale);
    precise float lo = mm.x * inv;
    float zp = clamp(-128.0 - roundEven(lo), -128.0, 127.0);
    if (real && lid == 0) rowq[r] = vec2(scale, zp);

    int K4 = (p.K + 3) / 4;
    for (int kb = lid; kb < K4; kb += LOCAL) {
        ivec4 v = ivec4(0);
        for (int t = 0; t < 4; ++t) {
            int k = 4 * kb + t;
            if (real && k < p.K) {
                precise float xi = x[r * p.K + k] * inv;
                precise float qf = roundEven(xi) + zp;
                v[t] = int(clamp(qf, -128.0, 127.0));
            }
        }
        q[((r / 4) * K4 + kb) * 4 + r % 4] = pack_int8x4(v);
    }
}

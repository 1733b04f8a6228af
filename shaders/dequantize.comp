#version 450
#extension GL_GOOGLE_include_directive : require
// packed int8 -> float NCHW per tensor: x = float(q - zero_point) * scale.
// One invocation reads one int32 word and writes its (up to) four values.
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int LAYOUT = LAYOUT_4W4C;

layout(std430, binding = 0) readonly buffer In { int q[]; };
layout(std430, binding = 1) writeonly buffer Out { float x[]; };
layout(push_constant) uniform Params {
    ivec4 shape;  // N, C, H, W
    float scale;
    int zero_point;
} p;

void main() {
    int i = linear_invocation();
    if (i >= packed_words(LAYOUT, p.shape)) return;
    ivec4 v = unpack_int8x4(q[i]);
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(LAYOUT, i, b, p.shape);
        if (in_bounds(e, p.shape)) {
            precise float t = float(v[b] - p.zero_point) * p.scale;
            x[nchw_offset(e, p.shape)] = t;
        }
    }
}

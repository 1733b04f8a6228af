#version 450
#extension GL_GOOGLE_include_directive : require
// packed int8 in layout SRC -> the same values in layout DST (e.g. 4W4C -> 4H4W).
// One invocation assembles one destination word from the four source bytes it holds.
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int SRC = LAYOUT_4W4C;
layout(constant_id = 4) const int DST = LAYOUT_4H4W;

layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) writeonly buffer Out { int dst[]; };
layout(push_constant) uniform Params { ivec4 shape; } p;

void main() {
    int i = linear_invocation();
    if (i >= packed_words(DST, p.shape)) return;
    ivec4 v = ivec4(0);
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(DST, i, b, p.shape);
        if (in_bounds(e, p.shape)) {
            ivec2 at = int8x4_locate(SRC, e, p.shape);
            v[b] = int8_at(src[at.x], at.y);
        }
    }
    dst[i] = pack_int8x4(v);
}

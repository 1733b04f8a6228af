#version 450
#extension GL_GOOGLE_include_directive : require
// packed int8 in layout SRC -> layout DST, optionally reshaped (row-major, same element
// count): a layout change (4W4C <-> 4H4W), a flatten between a conv and a linear, a view.
// One invocation assembles one destination word from the four source bytes it holds.
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int SRC = LAYOUT_4W4C;
layout(constant_id = 4) const int DST = LAYOUT_4H4W;

layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) writeonly buffer Out { int dst[]; };
layout(push_constant) uniform Params { ivec4 src_shape, dst_shape; } p;  // (N, C, H, W)

ivec4 unravel(int f, ivec4 shape) {  // row-major flat index -> (n, c, h, w)
    int w = f % shape.w; f /= shape.w;
    int h = f % shape.z; f /= shape.z;
    return ivec4(f / shape.y, f % shape.y, h, w);
}

void main() {
    int i = linear_invocation();
    if (i >= packed_words(DST, p.dst_shape)) return;
    ivec4 v = ivec4(0);
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(DST, i, b, p.dst_shape);
        if (in_bounds(e, p.dst_shape)) {
            ivec4 s = (p.src_shape == p.dst_shape) ? e : unravel(nchw_offset(e, p.dst_shape), p.src_shape);
            ivec2 at = int8x4_locate(SRC, s, p.src_shape);
            v[b] = int8_at(src[at.x], at.y);
        }
    }
    dst[i] = pack_int8x4(v);
}

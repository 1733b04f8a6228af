#version 450
#extension GL_GOOGLE_include_directive : require
// float NCHW -> packed int8 per tensor, as quantized_decomposed.quantize_per_tensor:
//   q = clamp(roundEven(x * inv_scale) + zero_point, qmin, qmax)
// One invocation writes one int32 word (four values); padding bytes are 0.
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int LAYOUT = LAYOUT_4W4C;

layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { int q[]; };
layout(push_constant) uniform Params {
    ivec4 shape;      // N, C, H, W
    float inv_scale;  // float32(1 / scale), as PyTorch forms it
    int zero_point, qmin, qmax;
} p;

void main() {
    int i = linear_invocation();
    if (i >= packed_words(LAYOUT, p.shape)) return;
    ivec4 v = ivec4(0);
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(LAYOUT, i, b, p.shape);
        if (in_bounds(e, p.shape)) {
            precise float t = roundEven(x[nchw_offset(e, p.shape)] * p.inv_scale) + float(p.zero_point);
            v[b] = int(clamp(t, float(p.qmin), float(p.qmax)));
        }
    }
    q[i] = pack_int8x4(v);
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Bicubic upsampling of float32 (planes, H, W) to (planes, Ho, Wo) (vkq/ops/resize.py), one
// output value an invocation. The taps are ATen's, computed on the host in float32: for each
// output row four source rows (clamped to the input) and their weights, the same per column,
// in `taps`: yi[4][Ho] wy[4][Ho] xi[4][Wo] wx[4][Wo] (weights as float bits). The sum runs in
// ATen's order, each op rounded once (precise: no fused multiply-add):
//   out = sum_i wy[i] * t_i,   t_i = sum_j x[yi[i], xi[j]] * wx[j]   (left to right)
#include "common.glsl"

layout(std430, binding = 0) readonly buffer In { float src[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(std430, binding = 2) readonly buffer Taps { int taps[]; };
layout(push_constant) uniform Params { ivec4 in_shape, out_shape; } p;   // (planes, H, W, 0)

void main() {
    int i = linear_invocation();
    const int H = p.in_shape.y, W = p.in_shape.z, Ho = p.out_shape.y, Wo = p.out_shape.z;
    if (i >= p.out_shape.x * Ho * Wo) return;
    const int w = i % Wo, h = (i / Wo) % Ho, plane = i / (Wo * Ho);
    const int cols = 8 * Ho;
    int xi[4];
    float wx[4];
    [[unroll]] for (int j = 0; j < 4; ++j) {
        xi[j] = taps[cols + j * Wo + w];
        wx[j] = intBitsToFloat(taps[cols + (4 + j) * Wo + w]);
    }
    precise float acc = 0.0;
    [[unroll]] for (int r = 0; r < 4; ++r) {
        const int row = (plane * H + taps[r * Ho + h]) * W;
        precise float t = src[row + xi[0]] * wx[0];
        [[unroll]] for (int j = 1; j < 4; ++j)
            t = t + src[row + xi[j]] * wx[j];
        precise float term = t * intBitsToFloat(taps[(4 + r) * Ho + h]);
        acc = r == 0 ? term : acc + term;
    }
    dst[i] = acc;
}

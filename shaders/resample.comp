#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Separable resampling of float32 (planes, H, W) to (planes, Ho, Wo) by taps computed on the host
// (vkq/ops/resize.py: bicubic, and the antialiased bilinear / bicubic of interpolate(antialias=True)),
// one output value an invocation. For each output row up to KH source rows and their weights, the
// same per column (up to KW), in `taps`:
//   ny[Ho] yi[KH][Ho] wy[KH][Ho] nx[Wo] xi[KW][Wo] wx[KW][Wo]   (n: the taps in use; weights as float bits)
// The sum runs in ATen's order (its separable passes: the columns first, then the rows), each op
// rounded once (precise: no fused multiply-add):
//   out = sum_i wy[i] * t_i,   t_i = sum_j x[yi[i], xi[j]] * wx[j]   (left to right)
#include "common.glsl"

layout(constant_id = 3) const int KH = 4;
layout(constant_id = 4) const int KW = 4;

layout(std430, binding = 0) readonly buffer In { float src[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(std430, binding = 2) readonly buffer Taps { int taps[]; };
layout(push_constant) uniform Params { ivec4 in_shape, out_shape; } p;   // (planes, H, W, 0)

void main() {
    int i = linear_invocation();
    const int H = p.in_shape.y, W = p.in_shape.z, Ho = p.out_shape.y, Wo = p.out_shape.z;
    if (i >= p.out_shape.x * Ho * Wo) return;
    const int w = i % Wo, h = (i / Wo) % Ho, plane = i / (Wo * Ho);
    const int cols = (1 + 2 * KH) * Ho;
    const int ny = taps[h], nx = taps[cols + w];
    precise float acc = 0.0;
    for (int r = 0; r < ny; ++r) {
        const int row = (plane * H + taps[(1 + r) * Ho + h]) * W;
        precise float t = src[row + taps[cols + Wo + w]] * intBitsToFloat(taps[cols + (1 + KW) * Wo + w]);
        for (int j = 1; j < nx; ++j)
            t = t + src[row + taps[cols + (1 + j) * Wo + w]] * intBitsToFloat(taps[cols + (1 + KW + j) * Wo + w]);
        precise float term = t * intBitsToFloat(taps[(1 + KH + r) * Ho + h]);
        acc = r == 0 ? term : acc + term;
    }
    dst[i] = acc;
}

#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// torch's grid_sample on float32 x (N, C, H, W) at grid (N, Ho, Wo, 2) -> (N, C, Ho, Wo)
// (vkq/ops/resize.py: grid_sample is the specification), one output value an invocation.
// Coordinates as ATen's CPU kernel computes them: (g + 1) * ((size - 1) / 2) with align_corners,
// else (g + 1) * (size / 2) - 0.5; border padding clamps to [0, size - 1], reflection reflects
// about the image's edges (pixel centres with align_corners) and clamps. Bilinear: the four
// corners' values (0 outside the image) weighted by the distances to the opposite sides, summed
// nw + ne + sw + se, each op rounded once; nearest: the corner at roundEven(x), roundEven(y).
#include "common.glsl"

layout(constant_id = 3) const int MODE = 0;        // 0 bilinear, 1 nearest
layout(constant_id = 4) const int PADDING = 0;     // 0 zeros, 1 border, 2 reflection
layout(constant_id = 5) const int ALIGN = 0;       // align_corners

layout(std430, binding = 0) readonly buffer In { float src[]; };
layout(std430, binding = 1) readonly buffer Grid { float grid[]; };
layout(std430, binding = 2) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Params { ivec4 in_shape, out_shape; } p;   // (N, C, H, W), (N, C, Ho, Wo)

// ATen's reflect_coordinates: coord reflected into [twice_low / 2, twice_high / 2]
float reflect_coord(float coord, int twice_low, int twice_high) {
    if (twice_low == twice_high) return 0.0;
    precise float low = float(twice_low) / 2.0, span = float(twice_high - twice_low) / 2.0;
    precise float c = abs(coord - low);
    precise float extra = c - span * trunc(c / span);     // fmod of non-negative values
    float flips = floor(c / span);
    precise float r = mod(flips, 2.0) == 0.0 ? extra + low : span - extra + low;
    return r;
}

float source(float g, int size) {
    precise float c = ALIGN != 0 ? (g + 1.0) * (float(size - 1) / 2.0) : (g + 1.0) * (float(size) / 2.0) - 0.5;
    if (PADDING == 2)
        c = ALIGN != 0 ? reflect_coord(c, 0, 2 * (size - 1)) : reflect_coord(c, -1, 2 * size - 1);
    if (PADDING != 0)
        c = clamp(c, 0.0, float(size - 1));
    return c;
}

void main() {
    int i = linear_invocation();
    const int N = p.out_shape.x, C = p.out_shape.y, Ho = p.out_shape.z, Wo = p.out_shape.w;
    const int H = p.in_shape.z, W = p.in_shape.w;
    if (i >= N * C * Ho * Wo) return;
    int t = i;
    const int wo = peel(t, Wo), ho = peel(t, Ho), c = peel(t, C), n = t;
    const int g = ((n * Ho + ho) * Wo + wo) * 2;
    const float ix = source(grid[g], W), iy = source(grid[g + 1], H);
    const int plane = (n * C + c) * H;
    if (MODE == 1) {
        const int x = int(clamp(roundEven(ix), -1.0, float(W))), y = int(clamp(roundEven(iy), -1.0, float(H)));
        bool inside = x >= 0 && x < W && y >= 0 && y < H;
        dst[i] = inside ? src[(plane + y) * W + x] : 0.0;
        return;
    }
    const float fx = floor(ix), fy = floor(iy);
    precise float we = ix - fx, wn = iy - fy, ww = 1.0 - we, ws = 1.0 - wn;
    const int x0 = int(clamp(fx, -2.0, float(W))), y0 = int(clamp(fy, -2.0, float(H)));   // (far outside: int overflow)
    float v[4];
    [[unroll]] for (int k = 0; k < 4; ++k) {
        const int y = y0 + (k >> 1), x = x0 + (k & 1);
        bool inside = x >= 0 && x < W && y >= 0 && y < H;
        v[k] = inside ? src[(plane + clamp(y, 0, H - 1)) * W + clamp(x, 0, W - 1)] : 0.0;
    }
    precise float r = v[0] * (ws * ww) + v[1] * (ws * we);
    r = r + v[2] * (wn * ww);
    r = r + v[3] * (wn * we);
    dst[i] = r;
}

#version 450
#extension GL_GOOGLE_include_directive : require
// int8 4W4C <-> 4H4W of one shape (a conv's output read by a matmul, and back): one invocation
// moves the 4x4x4 cube (4 channels x 4 rows x 4 widths) at (n, c4, h4, w4) — four ivec4 blocks
// in, the byte transpose in registers, four ivec4 blocks out. repack.comp's general gather
// assembles every byte from its own index computation and load: 4 MiB took 86-100 ms on
// lavapipe (0.01 of copy bandwidth), 3.0-3.9 ms with this (torch int8 channels_last: 6.5 ms).
//   4W4C block (n, h, w4, c4): word r = width 4*w4 + r, byte b = channel 4*c4 + b
//   4H4W block (n, c, h4, w4): word k = row 4*h4 + k,   byte r = width 4*w4 + r
// Padding bytes stay 0: a 4W4C block's words past W are 0 and so are a 4H4W block's bytes past W;
// rows past H are skipped on read (0) and on write; 4H4W has no channel padding, 4W4C's is 0.
//! variant TO_4H4W
//! variant TO_4W4C
//! variant TO_4H4W TEXEL
//! variant TO_4W4C TEXEL
#include "common.glsl"
#include "texel.glsl"

IVEC4_INPUT(0, src)   // texel.glsl
layout(std430, binding = 1) writeonly buffer Out { ivec4 dst[]; };
layout(push_constant) uniform Params {
    ivec4 shape;  // N, C, H, W
} p;

void main() {
    int N = p.shape.x, C = p.shape.y, H = p.shape.z, W = p.shape.w;
    int C4 = (C + 3) / 4, H4 = (H + 3) / 4, W4 = (W + 3) / 4;
    int i = linear_invocation();
    if (i >= N * C4 * H4 * W4) return;
    int w4 = i % W4, t = i / W4;                 // i = ((n*C4 + c4)*H4 + h4)*W4 + w4
    int h4 = t % H4; t /= H4;
    int c4 = t % C4, n = t / C4;
    int nh = min(4, H - 4 * h4), nc = min(4, C - 4 * c4);
    ivec4 a[4] = ivec4[4](ivec4(0), ivec4(0), ivec4(0), ivec4(0));
#ifdef TO_4H4W
    for (int k = 0; k < 4; ++k)                  // a[k] = 4W4C block of row 4*h4 + k
        if (k < nh) a[k] = LOAD4(src, ((n * H + 4 * h4 + k) * W4 + w4) * C4 + c4);
    for (int b = 0; b < 4; ++b) {                // 4H4W block of channel 4*c4 + b: word k, byte r
        if (b >= nc) break;
        ivec4 o;
        for (int k = 0; k < 4; ++k) {
            ivec4 bytes = (a[k] >> (8 * b)) & 0xFF;  // byte b (the channel) of each width's word
            o[k] = bytes.x | (bytes.y << 8) | (bytes.z << 16) | (bytes.w << 24);
        }
        dst[((n * C + 4 * c4 + b) * H4 + h4) * W4 + w4] = o;
    }
#else
    for (int b = 0; b < 4; ++b)                  // a[b] = 4H4W block of channel 4*c4 + b
        if (b < nc) a[b] = LOAD4(src, ((n * C + 4 * c4 + b) * H4 + h4) * W4 + w4);
    for (int k = 0; k < 4; ++k) {                // 4W4C block of row 4*h4 + k: word r, byte b
        if (k >= nh) break;
        ivec4 o;
        for (int r = 0; r < 4; ++r) {
            ivec4 bytes = ivec4(a[0][k], a[1][k], a[2][k], a[3][k]) >> (8 * r) & 0xFF;  // width r of each channel's row k
            o[r] = bytes.x | (bytes.y << 8) | (bytes.z << 16) | (bytes.w << 24);
        }
        dst[((n * H + 4 * h4 + k) * W4 + w4) * C4 + c4] = o;
    }
#endif
}

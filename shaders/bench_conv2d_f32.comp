#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifndef NO_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
// Bench-only (bench/bench_conv.py): a plain fp32 direct conv2d, stride 1, zero padding, with
// the tiling of conv2d_general (TOC channels x TH x TW positions per invocation, the x window
// loaded once with its halo columns from the next lane, weight words shared by the G lanes of a
// group), so that it and the int8 kernel differ in the data type only:
//   y[oc, oh, ow] = sum_{c, kh, kw} x[c, oh - P + kh, ow - P + kw] * w[oc, c, kh, kw]
// x and y are float (N, H, W, C/4) of vec4 (4 channels each): 4 words where int8 has one.
//! variant
//! variant NO_SUBGROUP
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "conv_common.glsl"

layout(constant_id = 4) const int TOC = 16;
layout(constant_id = 5) const int TH = 2;
layout(constant_id = 6) const int TW = 4;
layout(constant_id = 7) const int KH = 3;
layout(constant_id = 8) const int KW = 3;

const int WH = TH + KH - 1, WW = TW + KW - 1;
#ifdef NO_SUBGROUP
const int OWN = WW;
#else
const int OWN = WW <= 2 * TW ? TW : WW;   // columns a lane loads; the rest from the next lane
#endif
const int TAPW = KH * KW * TOC * 4;    // weight floats per block of 4 input channels
const int WREGS = (TAPW + G - 1) / G;

layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
// float ((((t*C4 + c4)*KH + kh)*KW + kw)*TOC + o)*4 + i = w[t*TOC + o, 4*c4 + i, kh, kw]
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { vec4 y[]; };
layout(push_constant) uniform Params {
    ivec4 in_shape;    // N, C, H, W
    ivec4 out_shape;   // N, OC, OH, OW
    int pad;
} p;

void main() {
    const int N = p.in_shape.x, C4 = up4(p.in_shape.y) / 4, H = p.in_shape.z, W = p.in_shape.w;
    const int OC = p.out_shape.y, OC4 = up4(OC) / 4, OH = p.out_shape.z, OW = p.out_shape.w;
    const int tiles_w = (OW + TW - 1) / TW, tiles = tiles_w * ((OH + TH - 1) / TH);
    const int spatial_groups = (tiles + G - 1) / G, oc_tiles = (OC + TOC - 1) / TOC;
    const int q = group_index(), lane = group_lane();
    const int t = (q / spatial_groups) % oc_tiles;
    int n = q / (spatial_groups * oc_tiles), st = (q % spatial_groups) * G + lane;
    const bool live = n < N && st < tiles;
    n = min(n, N - 1);
    st = min(st, tiles - 1);
    const int oh0 = st / tiles_w * TH, ow0 = st % tiles_w * TW;

    vec4 acc[TH * TW * TOC / 4];
    [[unroll]] for (int k = 0; k < TH * TW * TOC / 4; ++k) acc[k] = vec4(0.0);
    for (int c4 = 0; c4 < C4; ++c4) {
        vec4 xv[WH][WW];
        [[unroll]] for (int r = 0; r < WH; ++r)
        [[unroll]] for (int c = 0; c < WW; ++c) {
            if (c < OWN || lane == G - 1 || st % tiles_w == tiles_w - 1) {
                const int ih = oh0 - p.pad + r, iw = ow0 - p.pad + c;
                const vec4 v = x[((n * H + clamp(ih, 0, H - 1)) * W + clamp(iw, 0, W - 1)) * C4 + c4];
                xv[r][c] = ih >= 0 && ih < H && iw >= 0 && iw < W ? v : vec4(0.0);
            }
        }
#ifndef NO_SUBGROUP
        [[unroll]] for (int r = 0; r < WH; ++r)          // halo: the next lane's first columns
        [[unroll]] for (int c = OWN; c < WW; ++c) {
            const uint i = gl_SubgroupInvocationID;
            const vec4 v = subgroupShuffle(xv[r][c - OWN], (i & ~uint(G - 1)) | ((i + 1u) & uint(G - 1)));
            if (!(lane == G - 1 || st % tiles_w == tiles_w - 1)) xv[r][c] = v;
        }
#endif
        float wr[WREGS];
        [[unroll]] for (int i = 0; i < WREGS; ++i) wr[i] = w[(t * C4 + c4) * TAPW + i * G + lane];
        [[unroll]] for (int kh = 0; kh < KH; ++kh)
        [[unroll]] for (int kw = 0; kw < KW; ++kw)
        [[unroll]] for (int o = 0; o < TOC; ++o) {
            const int k = ((kh * KW + kw) * TOC + o) * 4;
            const vec4 wv = vec4(SHARE(wr, k), SHARE(wr, k + 1), SHARE(wr, k + 2), SHARE(wr, k + 3));
            [[unroll]] for (int i = 0; i < TH; ++i)
            [[unroll]] for (int j = 0; j < TW; ++j) {
                const vec4 xx = xv[i + kh][j + kw];
                const int a = (i * TW + j) * (TOC / 4) + o / 4;
                acc[a][o % 4] = fma(xx.x, wv.x, fma(xx.y, wv.y, fma(xx.z, wv.z, fma(xx.w, wv.w, acc[a][o % 4]))));
            }
        }
    }
    [[unroll]] for (int i = 0; i < TH; ++i)
    [[unroll]] for (int j = 0; j < TW; ++j)
    [[unroll]] for (int b = 0; b < TOC / 4; ++b) {
        const int oh = oh0 + i, ow = ow0 + j, oc4 = t * (TOC / 4) + b;
        if (live && oh < OH && ow < OW && oc4 < OC4)
            y[((n * OH + oh) * OW + ow) * OC4 + oc4] = acc[(i * TW + j) * (TOC / 4) + b];
    }
}

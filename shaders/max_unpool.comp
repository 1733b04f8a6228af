#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// max_unpool2d_q8 (vkq/ops/unpool.py) on 4W4C int8: v (N, C, VH, VW) placed where the max pool of
// x (N, C, H, W) found each window's maximum, zp elsewhere, in an (N, C, OH, OW) output:
//   out[n, c].flat[idx[n, c, p]] = v[n, c, p],   idx = max_pool2d_with_indices(x, ...)[1]
// (PyTorch's index: the window's first maximum, taps in row-major order, padding skipped, as the
// flat position ih * W + iw in x's plane). The host takes only windows that do not overlap
// (KH <= SH, KW <= SW, no dilation) into an output of at least H * W positions, so every output
// position lies in at most one window and no index falls outside: a gather, nothing written
// twice. One invocation per output ivec4 block (4 widths x 4 channels): for each of its positions
// o = oh * OW + ow, (ih, iw) = (o / W, o % W), the window holding it is found by division, its
// taps' first maxima per channel are taken, and v's byte goes where that maximum is this tap.
// FLOAT: the same on float32 (planes, H, W) row-major tensors, one output value an invocation
// (N = planes, C = 1), 0.0 elsewhere; a NaN tap is taken as ATen takes it (the window's last).
//! variant
//! variant TEXEL
//! variant FLOAT
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int KH = 2;
layout(constant_id = 4) const int KW = 2;
layout(constant_id = 5) const int SH = 2;
layout(constant_id = 6) const int SW = 2;
layout(constant_id = 7) const int PH = 0;
layout(constant_id = 8) const int PW = 0;
// the shapes: every index below divides by them (a division by a constant is a multiply)
layout(constant_id = 9) const int N = 1;
layout(constant_id = 10) const int C = 1;
layout(constant_id = 11) const int H = 1;     // x
layout(constant_id = 12) const int W = 1;
layout(constant_id = 13) const int VH = 1;    // v: the pool's output
layout(constant_id = 14) const int VW = 1;
layout(constant_id = 15) const int OH = 1;    // out
layout(constant_id = 16) const int OW = 1;

#ifdef FLOAT
layout(std430, binding = 0) readonly buffer v_ssbo { float vf[]; };
layout(std430, binding = 1) readonly buffer x_ssbo { float xf[]; };
layout(std430, binding = 2) writeonly buffer dst_ssbo { float dstf[]; };

void main() {
    int i = linear_invocation();
    if (i >= N * OH * OW) return;
    int plane = i / (OH * OW), o = i % (OH * OW);
    int ih = o / W, iw = o % W;
    int ph = (ih + PH) / SH, pw = (iw + PW) / SW;
    int th = ih + PH - ph * SH, tw = iw + PW - pw * SW;
    bool inside = tw < KW && ph < VH && pw < VW;     // (as below)
    ph = min(ph, VH - 1);
    pw = min(pw, VW - 1);
    float best = 0.0;
    int at = -1;
    [[unroll]] for (int kh = 0; kh < KH; ++kh)
        [[unroll]] for (int kw = 0; kw < KW; ++kw) {
            int h = ph * SH - PH + kh, w = pw * SW - PW + kw;
            float t = xf[(plane * H + clamp(h, 0, H - 1)) * W + clamp(w, 0, W - 1)];
            if (h >= 0 && h < H && w >= 0 && w < W && (at < 0 || t > best || isnan(t))) {
                best = t;
                at = kh * KW + kw;
            }
        }
    dstf[i] = inside && at == th * KW + tw ? vf[(plane * VH + ph) * VW + pw] : 0.0;
}
#else
IVEC4_WORDS_INPUT(0, v)
IVEC4_WORDS_INPUT(1, x)
IVEC4_OUTPUT(2, dst)
layout(push_constant) uniform Params {
    int zp_word;       // v's zero point in all four bytes
} p;

const int C4 = (C + 3) / 4;

// word (4 channels of c4) at (n, h, w) of a 4W4C tensor with rows of `w4` blocks
int word_at(int n, int h, int w, int c4, int rows, int w4) {
    return (((n * rows + h) * w4 + (w >> 2)) * C4 + c4) * 4 + (w & 3);
}

void main() {
    int i = linear_invocation();
    const int W4 = (W + 3) / 4, VW4 = (VW + 3) / 4, OW4 = (OW + 3) / 4;
    if (i >= N * OH * OW4 * C4) return;
    // i = ((n*OH + oh)*OW4 + ow4)*C4 + c4
    int c4 = i % C4, ow4 = (i / C4) % OW4, oh = (i / (C4 * OW4)) % OH, n = i / (C4 * OW4 * OH);
    ivec4 zp = unpack_int8x4(p.zp_word);
    ivec4 r;
    [[unroll]] for (int j = 0; j < 4; ++j) {     // positions past OW are computed and masked
        int o = oh * OW + min(4 * ow4 + j, OW - 1);
        int ih = o / W, iw = o % W;
        int ph = (ih + PH) / SH, pw = (iw + PW) / SW;          // the window that may hold (ih, iw)
        int th = ih + PH - ph * SH, tw = iw + PW - pw * SW;    // ... as its tap (th, tw)
        // (th >= KH or ih >= H need no test: no tap of the window is (th, tw) then, so `at` differs)
        bool inside = tw < KW && ph < VH && pw < VW;
        ph = min(ph, VH - 1);
        pw = min(pw, VW - 1);
        ivec4 best = ivec4(-129), at = ivec4(-1);
        [[unroll]] for (int kh = 0; kh < KH; ++kh)
            [[unroll]] for (int kw = 0; kw < KW; ++kw) {
                int h = ph * SH - PH + kh, w = pw * SW - PW + kw;
                bool tap = h >= 0 && h < H && w >= 0 && w < W;
                ivec4 t = unpack_int8x4(WORD(x, word_at(n, clamp(h, 0, H - 1), clamp(w, 0, W - 1), c4, H, W4)));
                bvec4 take = bvec4(ivec4(tap) & ivec4(greaterThan(t, best)));
                best = mix(best, t, take);
                at = mix(at, ivec4(kh * KW + kw), take);
            }
        ivec4 vals = unpack_int8x4(WORD(v, word_at(n, ph, pw, c4, VH, VW4)));
        bvec4 mine = bvec4(ivec4(inside) & ivec4(equal(at, ivec4(th * KW + tw))));
        r[j] = pack_int8x4(mix(zp, vals, mine));
    }
    int o = ((n * OH + oh) * OW4 + ow4) * C4 + c4;
    STORE4(dst, o, before_store(r & block_mask(o, ivec4(C, C4, OW, OW4))));   // common.glsl
}
#endif

#version 450
#extension GL_GOOGLE_include_directive : require
// Layer norm over the trailing D values of each row (vkq/ops/float.py layer_norm), a row per
// invocation (ROW_LANE: CPU drivers, rows of at most 512 values), per subgroup (ROW_SUBGROUP)
// or per workgroup (include/float_workgroup.glsl), two passes over the row (mean, then the mean
// of squared deviations):
//   y[r, j] = (x[r, j] - mean_r) * inversesqrt(var_r + eps) * w[c] + b[c],  c = (r % G) * CG + j / HW
// layer_norm: G = 1, CG = D, HW = 1 (c = j); group_norm: a row is one group of one image
// (CG channels of HW values), c its channel.
// float32 sums (the reference sums in float64): relative error of mean/var ~ D/lanes ulp.
// VEC (a specialization constant the host sets where HW = 1 and CG % 4 == 0: layer_norm with D % 4 == 0):
// as float_softmax.comp's vec path, a lane reads its values as vec4s and keeps KEEP of them in
// registers over the three passes (x read once), with no division j / HW; stores are vec4s.
// TEXEL: x, w and bias through texel fetches (texel.glsl).
// CENTER = 0 (specialization constant 6): rms_norm, bit-exact on every path and device: row_rms
// below (its own canonical order of summation; constants 7, 8: PART_LANES, PART_T).
// Q8 (layer_norm_q8, VEC only): x an int8 tensor in 4H4W and y one too, quantized as it is
// written (rows of the trailing dim: 4 values a word, a block's 4 rows in consecutive words; the
// rows that pad H to a multiple of 4 written 0, as quantize does): the dequantize -> layer_norm
// -> quantize of a transformer's static int8 graph in one pass that moves int8, not two float
// tensors. Equal to its reference bit for bit on every device (vkq/ops/float.py layer_norm_q8):
// the row statistics are integers (S1 = sum e, S2 = sum e^2, e = x - x_zp, and D^2 var = D S2 -
// S1^2 in 64 bits), the same in any order of summation; what follows is float32 steps that are
// correctly rounded in Vulkan (conversions of integers below 2^24, +, *; `precise`: no fused
// multiply-adds), in one order, and 1/sqrt by Newton's iterations from a bit-pattern seed
// (inversesqrt and / may be 2-3 ulp off, differently on each device).
//! variant ROW_SUBGROUP
//! variant ROW_LANE
//! variant ROW_LANE TEXEL
//! variant ROW_WORKGROUP
//! variant ROW_SUBGROUP TEXEL
//! variant ROW_WORKGROUP TEXEL
//! variant Q8 ROW_SUBGROUP
//! variant Q8 ROW_LANE
//! variant Q8 ROW_LANE TEXEL
//! variant Q8 ROW_WORKGROUP
//! variant Q8 ROW_SUBGROUP TEXEL
//! variant Q8 ROW_WORKGROUP TEXEL
#extension GL_EXT_control_flow_attributes : require
#ifdef Q8
#define ROW_SUM_INT
#endif
#include "common.glsl"
#include "texel.glsl"
#include "int8x4.glsl"
#include "fake_quant.glsl"
#include "float_exact.glsl"

layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two
#include "float_workgroup.glsl"
#ifdef ROW_SUBGROUP
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
layout(constant_id = 6) const int CENTER = 1;

IVEC4_WORDS_INPUT(0, xb)                         // texel.glsl: floats as their bits
IVEC4_WORDS_INPUT(1, wb)
IVEC4_WORDS_INPUT(2, bb)
#define X(i) intBitsToFloat(WORD(xb, i))
#define W(i) intBitsToFloat(WORD(wb, i))
#define BIAS(i) intBitsToFloat(WORD(bb, i))
layout(push_constant) uniform Params {
    int R, D;
    float eps;
    int G, CG, HW;
    int H;                         // Q8: the rows of an image (N, C, H, D), for the 4H4W words
    float x_scale;
    int x_zp;
    float out_inv_scale;
    int out_zp, qmin, qmax;
#ifdef Q8
    float inv_d2, x_scale2, x_scale_d;   // float32(1 / D^2), float32(x_scale^2), float32(x_scale / D)
#else
    float inv_d;                         // rms_norm: float32(1 / D)
#endif
} p;
#ifdef Q8
layout(std430, binding = 3) writeonly buffer Y { int yq[]; };
// row r's j4-th word (4 values) is word first + 4 j4 (4H4W: a block holds 4 rows' words in turn)
int row_word(int r) {
    const int nc = r / p.H, h = r - nc * p.H;
    return ((nc * ((p.H + 3) / 4) + h / 4) * (p.D / 4)) * 4 + (h & 3);
}
#define E4(i) (unpack_int8x4(WORD(xb, i)) - p.x_zp)
#define STORE_Y4(i, v) yq[(i)] = pack_int8x4(quantize_vec4(v, p.out_inv_scale, p.out_zp, p.qmin, p.qmax))
#define STEP 4

void row_q8(int r, int l, int n) {
    const int D4 = p.D / 4, base4 = row_word(r), c4 = (r % p.G) * p.CG / 4;
    ivec4 v[KEEP];
    int s1 = 0, s2 = 0;
    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        const int j4 = l + i * n;
        v[i] = j4 < D4 ? E4(base4 + STEP * j4) : ivec4(0);
        s1 += (v[i].x + v[i].y) + (v[i].z + v[i].w);
        s2 += (v[i].x * v[i].x + v[i].y * v[i].y) + (v[i].z * v[i].z + v[i].w * v[i].w);
    }
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n) {
        const ivec4 e = E4(base4 + STEP * j4);
        s1 += (e.x + e.y) + (e.z + e.w);
        s2 += (e.x * e.x + e.y * e.y) + (e.z * e.z + e.w * e.w);
    }
    s1 = row_sum_int(s1);
    s2 = row_sum_int(s2);
    uint h1, l1, h2, l2;                          // D^2 var = D S2 - S1^2 >= 0, in (hi, lo)
    umulExtended(uint(p.D), uint(s2), h1, l1);
    umulExtended(uint(abs(s1)), uint(abs(s1)), h2, l2);
    const uint lo = l1 - l2, hi = h1 - h2 - uint(l1 < l2);
    precise float vd = (float(hi) * 4294967296.0 + float(lo >> 16) * 65536.0) + float(lo & 0xFFFFu);
    precise float t = vd * p.inv_d2 * p.x_scale2 + p.eps;
    precise float scale_k = rsqrt_newton(t) * p.x_scale_d;
    // y = (x - mean) rstd w + b = (e D - S1) (x_scale / D) rstd w + b
    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        const int j4 = l + i * n;
        if (j4 < D4) {
            precise vec4 y = vec4(v[i] * p.D - s1) * scale_k * intBitsToFloat(LOAD4(wb, c4 + j4)) + intBitsToFloat(LOAD4(bb, c4 + j4));
            STORE_Y4(base4 + STEP * j4, y);
        }
    }
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n) {
        precise vec4 y = vec4(E4(base4 + STEP * j4) * p.D - s1) * scale_k * intBitsToFloat(LOAD4(wb, c4 + j4)) + intBitsToFloat(LOAD4(bb, c4 + j4));
        STORE_Y4(base4 + STEP * j4, y);
    }
    const int h = r - r / p.H * p.H;          // the last row of an image: the padding rows after it
    if (h == p.H - 1)
        for (int k = 1; k < 4 - (h & 3); ++k)
            for (int j4 = l; j4 < D4; j4 += n) yq[base4 + k + 4 * j4] = 0;
}
#else
#define X4(i) intBitsToFloat(LOAD4(xb, i))
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
VEC4_OUTPUT(3, y4)   // the same words by vec4 (texel.glsl)
int row_word(int r) { return r * (p.D / 4); }
#define STORE_Y4(i, v) STORE_VEC4(y4, i, v)
#define STEP 1
#endif

#ifndef Q8
// rms_norm (CENTER = 0), bit-exact (float_exact.glsl; vkq/ops/float.py rms_norm and
// sum_squares_canonical are its twins): the row as vec4s q' (the last one padded with zeros
// where D % 4 != 0), vec4 q' into vec4 partial q = q' % 16, each partial summed in index order;
// S_q = (p.x + p.y) + (p.z + p.w); then the halving tree over the 16 S_q. Lane l of the row's
// PART_LANES (its lanes, at most 16; the rest add zeros) holds the PART_T = 16 / PART_LANES
// partials q = l + PART_LANES t, sums them in the tree's first levels itself and the rest across
// lanes (row_tree: the same halving order). Then mean = ftz(ss * f32(1/D)), t = mean + eps,
// r = rsqrt_newton(t) (0 where t is inf), y = ftz(ftz(ftz(x) r) ftz(w)).
layout(constant_id = 7) const int PART_LANES = 1;
layout(constant_id = 8) const int PART_T = 16;

float row_tree(float v) {      // the halving tree over the row's lanes: lane i + lane i + m, m = lanes/2 .. 1
#if defined(ROW_SUBGROUP)
    for (int m = lanes() / 2; m > 0; m >>= 1) {
        precise float s = v + subgroupShuffleXor(v, m);   // (lane i and lane i ^ m: the same sum)
        v = s;
    }
    return v;
#else
    return row_sum(v);         // ROW_LANE: v; a workgroup: float_workgroup.glsl's tree, this order
#endif
}

vec4 squares4(int r, int q) {  // row r's vec4 q squared, subnormal squares 0
    vec4 v;
    if (VEC != 0) {
        v = X4(row_word(r) + q);
    } else {
        const int base = r * p.D, j = 4 * q;
        v = vec4(X(base + j), j + 1 < p.D ? X(base + j + 1) : 0.0, j + 2 < p.D ? X(base + j + 2) : 0.0,
                 j + 3 < p.D ? X(base + j + 3) : 0.0);
    }
    precise vec4 s = v * v;
    return ftz(s);
}

void row_rms(int r, int l, int n) {
    const int Q = (p.D + 3) / 4;
    precise vec4 acc[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) acc[t] = vec4(0.0);
    if (l < PART_LANES)
        for (int c = l; c < Q; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int q = c + t * PART_LANES;
                if (q < Q) acc[t] = acc[t] + squares4(r, q);
            }
    precise float s[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) s[t] = (acc[t].x + acc[t].y) + (acc[t].z + acc[t].w);
    [[unroll]] for (int h = PART_T / 2; h > 0; h >>= 1)
        [[unroll]] for (int t = 0; t < h; ++t) s[t] = s[t] + s[t + h];
    precise float t = ftz(row_tree(s[0]) * p.inv_d) + p.eps;
    const float k = isinf(t) ? 0.0 : rsqrt_newton(t);
    if (VEC != 0) {
        const int base4 = row_word(r);
        for (int j4 = l; j4 < p.D / 4; j4 += n) {
            precise vec4 a = ftz(X4(base4 + j4)) * k;
            precise vec4 b = ftz(a) * ftz(intBitsToFloat(LOAD4(wb, j4)));
            STORE_Y4(base4 + j4, ftz(b));
        }
    } else {
        const int base = r * p.D;
        for (int j = l; j < p.D; j += n) {
            precise float a = ftz(X(base + j)) * k;
            precise float b = ftz(a) * ftz(W(j));
            y[base + j] = ftz(b);
        }
    }
}

void row_vec4(int r, int l, int n) {
    const int D4 = p.D / 4, base4 = row_word(r), c4 = (r % p.G) * p.CG / 4;
    vec4 v[KEEP];
    float s = 0.0;
    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        const int j4 = l + i * n;
        v[i] = j4 < D4 ? X4(base4 + STEP * j4) : vec4(0.0);
        s += sum4(v[i]);
    }
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n) s += sum4(X4(base4 + STEP * j4));
    const float mean = CENTER != 0 ? row_sum(s) / float(p.D) : 0.0;

    float ss = 0.0;
    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        const vec4 d = v[i] - mean;
        if (l + i * n < D4) ss += sum4(d * d);
    }
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n) {
        const vec4 d = X4(base4 + STEP * j4) - mean;
        ss += sum4(d * d);
    }
    const float rstd = inversesqrt(row_sum(ss) / float(p.D) + p.eps);

    [[unroll]] for (int i = 0; i < KEEP; ++i) {
        const int j4 = l + i * n;
        if (j4 < D4)
            STORE_Y4(base4 + STEP * j4, (v[i] - mean) * rstd * intBitsToFloat(LOAD4(wb, c4 + j4)) + intBitsToFloat(LOAD4(bb, c4 + j4)));
    }
    for (int j4 = l + KEEP * n; j4 < D4; j4 += n)
        STORE_Y4(base4 + STEP * j4, (X4(base4 + STEP * j4) - mean) * rstd * intBitsToFloat(LOAD4(wb, c4 + j4)) + intBitsToFloat(LOAD4(bb, c4 + j4)));
}
#endif

void main() {
    int l = lane(), n = lanes();
    for (int r = first_row(); r < p.R; r += row_stride()) {   // uniform over a row's owner
#ifdef Q8
        row_q8(r, l, n);
#else
        if (CENTER == 0) {
            row_rms(r, l, n);
            continue;
        }
        if (VEC != 0) {
            row_vec4(r, l, n);
            continue;
        }
        int base = r * p.D;
        float mean = 0.0;
        if (CENTER != 0) {
            float s = 0.0;
            for (int j = l; j < p.D; j += n) s += X(base + j);
            mean = row_sum(s) / float(p.D);
        }

        float ss = 0.0;
        for (int j = l; j < p.D; j += n) {
            float d = X(base + j) - mean;
            ss += d * d;
        }
        float rstd = inversesqrt(row_sum(ss) / float(p.D) + p.eps);

        int c0 = (r % p.G) * p.CG;
        for (int j = l; j < p.D; j += n) {
            int c = c0 + j / p.HW;
            y[base + j] = (X(base + j) - mean) * rstd * W(c) + BIAS(c);
        }
#endif
    }
}

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
#define ROW_CANON
#include "float_workgroup.glsl"
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
    float inv_d;                         // float32(1 / D)
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
// layer_norm, group_norm (CENTER = 1) and rms_norm (CENTER = 0), bit-exact on every path and
// device (float_exact.glsl's rules; vkq/ops/float_norm.py layer_norm, group_norm and rms_norm are
// the twins). Values are ftz'd as read (x_j below). Sums are float_exact.glsl's canonical row sum
// (vkq/ops/float_math.py sum_canonical): the row as vec4s q (values 4q .. 4q + 3, zeros past D),
// vec4 q added into partial vec4 q % 16 in index order (ftz after each add of a signed sum: one
// may pass through a subnormal, which a device may flush); S_q = (P.x + P.y) + (P.z + P.w); the
// halving tree over the 16 S_q (S_q + S_q+8, + 4, + 2, + 1), ftz after each add. Lane l of the
// row's PART_LANES (its lanes, at most 16; the others hold zeros) visits the vec4s
// q = l + 16 c + PART_LANES t (c = 0, 1, ...; t < PART_T = 16 / PART_LANES), keeps the first
// KEEP visits in registers (a multiple of PART_T), sums partials t itself in the tree's first
// levels and the rest across lanes (row_tree: the same halving order). Then, 1/D a float32 from
// the host:
//   CENTER 1: mean = ftz(S(x) * 1/D), d_j = ftz(x_j - mean), t = ftz(S(ftz(d^2)) * 1/D) + eps,
//             y_j = ftz(ftz(ftz(d_j k) * ftz(w_c)) + ftz(b_c))
//   CENTER 0: t = ftz(S(ftz(x^2)) * 1/D) + eps,  y_j = ftz(ftz(x_j k) * ftz(w_j))
// with k = rsqrt_newton(t) (0 where t is inf) and c = (r % G) * CG + j / HW (group_norm's channel).
vec4 quad(int r, int q) {      // row r's values 4q .. 4q + 3, ftz'd, zeros past D
    vec4 v;
    if (VEC != 0) {
        v = X4(row_word(r) + q);
    } else {
        const int base = r * p.D, j = 4 * q;
        v = vec4(X(base + j), j + 1 < p.D ? X(base + j + 1) : 0.0, j + 2 < p.D ? X(base + j + 2) : 0.0,
                 j + 3 < p.D ? X(base + j + 3) : 0.0);
    }
    return ftz(v);
}

vec4 deviation(vec4 v, int q, float mean) {   // ftz(x - mean), zeros past D
    precise vec4 d = v - mean;
    return mix(ftz(d), vec4(0.0), greaterThanEqual(4 * q + ivec4(0, 1, 2, 3), ivec4(p.D)));
}

// what: 0 sum x (signed), 1 sum ftz((x - mean)^2), 2 sum ftz(x^2)
vec4 term(vec4 v, int q, float mean, int what) {
    if (what == 0) return v;
    const vec4 d = what == 1 ? deviation(v, q, mean) : v;
    precise vec4 s = d * d;
    return ftz(s);
}

float row_canon(int r, int l, int Q, vec4 v[KEEP], float mean, int what) {
    precise vec4 acc[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) acc[t] = vec4(0.0);
    if (l < PART_LANES) {
        [[unroll]] for (int i = 0; i < KEEP; ++i) {
            precise vec4 a = acc[i % PART_T] + term(v[i], VISIT(i), mean, what);   // (past Q: v is 0)
            acc[i % PART_T] = what == 0 ? ftz(a) : a;
        }
        for (int c = l + 16 * (KEEP / PART_T); c < Q; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int q = c + t * PART_LANES;
                if (q < Q) {
                    precise vec4 a = acc[t] + term(quad(r, q), q, mean, what);
                    acc[t] = what == 0 ? ftz(a) : a;
                }
            }
    }
    return canon_total(acc);
}

void store_quad(int r, int q, vec4 v, float mean, float k) {
    if (VEC != 0) {
        const int c4 = (r % p.G) * p.CG / 4 + q;
        precise vec4 a = (CENTER != 0 ? deviation(v, q, mean) : v) * k;
        precise vec4 b = ftz(a) * ftz(intBitsToFloat(LOAD4(wb, c4)));
        if (CENTER != 0) {
            precise vec4 c = ftz(b) + ftz(intBitsToFloat(LOAD4(bb, c4)));
            b = c;
        }
        STORE_Y4(row_word(r) + q, ftz(b));
        return;
    }
    const vec4 d = CENTER != 0 ? deviation(v, q, mean) : v;
    const int base = r * p.D, c0 = (r % p.G) * p.CG;
    [[unroll]] for (int k4 = 0; k4 < 4; ++k4) {
        const int j = 4 * q + k4;
        if (j < p.D) {
            const int c = c0 + j / p.HW;
            precise float a = d[k4] * k;
            precise float b = ftz(a) * ftz(W(c));
            if (CENTER != 0) {
                precise float e = ftz(b) + ftz(BIAS(c));
                b = e;
            }
            y[base + j] = ftz(b);
        }
    }
}

void row_exact(int r, int l) {
    const int Q = (p.D + 3) / 4;
    vec4 v[KEEP];
    [[unroll]] for (int i = 0; i < KEEP; ++i) v[i] = l < PART_LANES && VISIT(i) < Q ? quad(r, VISIT(i)) : vec4(0.0);
    float mean = 0.0;
    if (CENTER != 0) {
        precise float m = ftz(row_canon(r, l, Q, v, 0.0, 0) * p.inv_d);
        mean = m;
    }
    precise float t = ftz(row_canon(r, l, Q, v, mean, CENTER != 0 ? 1 : 2) * p.inv_d) + p.eps;
    const float k = isinf(t) ? 0.0 : rsqrt_newton(t);
    if (l < PART_LANES) {
        [[unroll]] for (int i = 0; i < KEEP; ++i)
            if (VISIT(i) < Q) store_quad(r, VISIT(i), v[i], mean, k);
        for (int c = l + 16 * (KEEP / PART_T); c < Q; c += 16)
            [[unroll]] for (int t = 0; t < PART_T; ++t) {
                const int q = c + t * PART_LANES;
                if (q < Q) store_quad(r, q, quad(r, q), mean, k);
            }
    }
}
#endif

void main() {
    int l = lane(), n = lanes();
    for (int r = first_row(); r < p.R; r += row_stride()) {   // uniform over a row's owner
#ifdef Q8
        row_q8(r, l, n);
#else
        row_exact(r, l);
#endif
    }
}

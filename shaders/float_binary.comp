#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Elementwise float32 out = a (op) b with numpy broadcasting, or a (op) scalar / scalar (op) a
// (vkq/ops/float.py); maximum / minimum too. The iteration runs over the output (rank <= 6 after merging dims that
// are contiguous in every operand); a broadcast dim has stride 0. b is scaled by alpha first
// (add/sub's alpha), each float op rounded once (`precise`: no fused multiply-add), so add,
// sub and mul agree with numpy bit for bit; div is float_math.glsl's div_f32 (no division
// instruction: Vulkan's is 2.5 ulp), the same bits on every device and in vkq/ops/float_math.py
// div_f32 (IEEE's quotient where that is normal, a zero where it is subnormal).
// CONTIG: a and b (if a tensor) contiguous in the output's order (rank 1, strides 1): no index
// arithmetic (integer division is scalarised on CPU drivers), and an invocation does blocks of
// 4 values by vec4 loads and stores (the last, partial block value by value; see float_unary).
// TEXEL (CONTIG): a and b through texel fetches (texel.glsl).
// FQ (specialization constant): a fake_quantize of the result folded in (vkq/ops/float.py
// fold_fake_quantize), each value through fake_quant.glsl before its store: Swin's attention
// bias and mask adds, whose sums PT2E quantizes and dequantizes.
// ROWS: the last (merged) dim contiguous in a (stride 1) and in b (1, or 0: one value a row),
// the others broadcast as they may (attention's bias and mask, (B, heads, N, N) + (1, heads, N, N)):
// an invocation takes 4 consecutive values of a row, its position divided out once, not once a
// value. lavapipe (Xeon, 2 cores): (64, 3, 49, 49) + (1, 3, 49, 49) 6.2 -> 4.0 ms, + (64, 1, 49,
// 49) 7.1 -> 4.2. Tried, no better: an invocation taking PER consecutive blocks of its row (4.0);
// a's and the output's values by vec4 where a has the output's shape, b's value by value (5.1,
// as storage buffers: FLAT below is that with a as texels and the output by 64-bit stores).
// FLAT (ROWS where a has the output's shape, its rows of >= 4 values: Swin's attention + its
// relative-position bias, (64, 3, 49, 49) + (3, 49, 49), merged to rows of 7203): blocks of 4
// consecutive output values across rows, a by one vec4 load, the output by one vec4 store (the
// last, partial block value by value), b value by value (a row may end inside a block: the
// values past it are the next row's). TEXEL: a and b through texel fetches (constants go up as
// whole texels), the output by 64-bit stores. lavapipe at 512 bits, GPU time (machine under a
// test run), Swin-T's (64, 3, 49, 49) + (3, 49, 49): ROWS 8.05 ms, FLAT TEXEL 5.0; its shifted
// windows' mask, (4, 16, 3, 49, 49) + (1, 16, 1, 49, 49): 8.8 -> 5.6. Then (idle, Xeon), b as
// texels too: bias 2.7 -> 2.0 ms, and the row and broadcast indices by div_exact (common.glsl)
// instead of integer divisions 2.0 -> 1.75-2.0 (a contiguous add of the same size: 1.1 ms;
// FLAT without b's loads: 1.46).
//! variant OP_ADD
//! variant OP_SUB
//! variant OP_MUL
//! variant OP_DIV
//! variant OP_ADD CONTIG
//! variant OP_SUB CONTIG
//! variant OP_MUL CONTIG
//! variant OP_DIV CONTIG
//! variant OP_ADD CONTIG TEXEL
//! variant OP_SUB CONTIG TEXEL
//! variant OP_MUL CONTIG TEXEL
//! variant OP_DIV CONTIG TEXEL
//! variant OP_MAXIMUM
//! variant OP_MINIMUM
//! variant OP_ADD ROWS
//! variant OP_SUB ROWS
//! variant OP_MUL ROWS
//! variant OP_DIV ROWS
//! variant OP_MAXIMUM ROWS
//! variant OP_MINIMUM ROWS
//! variant OP_MAXIMUM CONTIG
//! variant OP_MINIMUM CONTIG
//! variant OP_MAXIMUM CONTIG TEXEL
//! variant OP_MINIMUM CONTIG TEXEL
//! variant OP_ADD FLAT
//! variant OP_SUB FLAT
//! variant OP_MUL FLAT
//! variant OP_DIV FLAT
//! variant OP_MAXIMUM FLAT
//! variant OP_MINIMUM FLAT
//! variant OP_ADD FLAT TEXEL
//! variant OP_SUB FLAT TEXEL
//! variant OP_MUL FLAT TEXEL
//! variant OP_DIV FLAT TEXEL
//! variant OP_MAXIMUM FLAT TEXEL
//! variant OP_MINIMUM FLAT TEXEL
#include "common.glsl"
#include "texel.glsl"
#include "fake_quant.glsl"
#ifdef OP_DIV
#include "float_math.glsl"      // div_f32 (only here: its global constants would go into every variant)
#endif

layout(constant_id = 3) const int PER = 4;
layout(constant_id = 4) const int FQ = 0;   // 1: a fake_quantize folded in, applied to every value (p.fq)

#ifdef CONTIG
IVEC4_WORDS_INPUT(0, ab)          // texel.glsl: floats as their bits
IVEC4_WORDS_INPUT(1, bb)
VEC4_OUTPUT(2, o4)   // the same words by vec4 (texel.glsl)
#elif defined(FLAT)
IVEC4_WORDS_INPUT(0, ab)
IVEC4_WORDS_INPUT(1, bb)
VEC4_OUTPUT(2, o4)
#else
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
#endif
layout(std430, binding = 2) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params {
    int n, rank;
    int mode;           // 0: a op b;  1: a op scalar;  2: scalar op a
    float scalar, alpha;
    int shape[6];       // the output's, merged
    int sa[6], sb[6];   // element strides of a and b along those dims (0: broadcast)
    FakeQuant fq;       // (FQ) fake_quant.glsl
} p;

// x (op) y for one value of a and of b (the scalar in modes 1 and 2), each op rounded once
float op(float x, float b_value) {
#if defined(OP_DIV)      // alpha (torch's div has none: 1) only where it is not 1: a product by 1
    precise float y = p.mode == 0 ? b_value : p.scalar;          // flushes a subnormal y where
    y = p.alpha == 1.0 ? y : ftz(ftz(y) * p.alpha);               // the device flushes them
#else
    precise float y = (p.mode == 0 ? b_value : p.scalar) * p.alpha;
#endif
    if (p.mode == 2) { float tmp = x; x = y; y = tmp; }
#if defined(OP_ADD)
    precise float r = x + y;
#elif defined(OP_SUB)
    precise float r = x - y;
#elif defined(OP_MUL)
    precise float r = x * y;
#elif defined(OP_MAXIMUM)             // (a NaN operand gives NaN, as torch.maximum)
    float r = isnan(x) || isnan(y) ? x + y : max(x, y);
#elif defined(OP_MINIMUM)
    float r = isnan(x) || isnan(y) ? x + y : min(x, y);
#else
    float r = div_f32(x, y);
#endif
    return FQ != 0 ? fake_quantize(r, p.fq) : r;
}

#ifdef CONTIG
#define A(i) intBitsToFloat(WORD(ab, i))
#define B(i) intBitsToFloat(WORD(bb, i))
void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();                  // block i: values 4i .. 4i + 3
    for (int k = 0; k < PER && 4 * i < p.n; ++k, i += stride) {
        if (4 * i + 4 <= p.n) {
            const vec4 x = intBitsToFloat(LOAD4(ab, i));
            const vec4 y = p.mode == 0 ? intBitsToFloat(LOAD4(bb, i)) : vec4(0.0);
            STORE_VEC4(o4, i, vec4(op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w)));
        } else {
            for (int e = 4 * i; e < p.n; ++e) o[e] = op(A(e), p.mode == 0 ? B(e) : 0.0);
        }
    }
}
#elif defined(FLAT)
int b_row(int r) {          // b's offset of row r (the output's row-major rows of L values)
    int ob = 0;
    for (int d = p.rank - 2; d >= 0; --d) {
        const int s = p.shape[d], t = div_exact(r, s);
        ob += (r - t * s) * p.sb[d];
        r = t;
    }
    return ob;
}

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    const int L = p.shape[p.rank - 1], sbl = p.sb[p.rank - 1];
    int i = linear_invocation();                  // block i: output values 4i .. 4i + 3
    for (int k = 0; k < PER && 4 * i < p.n; ++k, i += stride) {
        const int e0 = 4 * i, r = div_exact(e0, L), j0 = e0 - r * L;
        const int b0 = b_row(r), b1 = j0 + 3 >= L ? b_row(r + 1) : b0;   // L >= 4: at most two rows
        vec4 y;
        [[unroll]] for (int c = 0; c < 4; ++c) {   // past n: the last value again (not stored)
            const int j = min(j0 + c, j0 + p.n - 1 - e0);
            y[c] = intBitsToFloat(WORD(bb, j < L ? b0 + j * sbl : b1 + (j - L) * sbl));
        }
        if (e0 + 4 <= p.n) {
            const vec4 x = intBitsToFloat(LOAD4(ab, i));
            STORE_VEC4(o4, i, vec4(op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w)));
        } else {
            for (int e = e0; e < p.n; ++e) o[e] = op(intBitsToFloat(WORD(ab, e)), y[e - e0]);
        }
    }
}
#elif defined(ROWS)
void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    const int L = p.shape[p.rank - 1], L4 = (L + 3) / 4, sbl = p.sb[p.rank - 1];
    const int blocks = p.n / L * L4;
    int i = linear_invocation();                   // block i: values 4j .. 4j + 3 of row r
    for (int k = 0; k < PER && i < blocks; ++k, i += stride) {
        const int r = i / L4, j = 4 * (i - r * L4);
        int oa = j, ob = j * sbl, t = r;
        for (int d = p.rank - 2; d >= 0; --d) {
            int s = p.shape[d], q = t % s;
            t /= s;
            oa += q * p.sa[d];
            ob += q * p.sb[d];
        }
        const int oo = r * L + j, m = min(4, L - j);
        for (int e = 0; e < m; ++e) o[oo + e] = op(a[oa + e], p.mode == 0 ? b[ob + e * sbl] : 0.0);
    }
}
#else
void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
        int oa = 0, ob = 0, t = i;
        for (int d = p.rank - 1; d >= 0; --d) {
            int s = p.shape[d], j = t % s;
            t /= s;
            oa += j * p.sa[d];
            ob += j * p.sb[d];
        }
        o[i] = op(a[oa], p.mode == 0 ? b[ob] : 0.0);
    }
}
#endif

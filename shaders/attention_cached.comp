#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Attention of new queries over a static KV cache, its filled prefix only (vkq/ops/attention_cached.py):
//   p = positions[t] (clamped to [0, N)), lo = window > 0 ? max(0, p - window + 1) : 0
//   s_j = dot(q[b,h,t], k[b,kh,j]) * scale   (softcap > 0: softcap * tanh(s_j / softcap))
//   out[b,h,t] = sum_{j=lo..p} softmax(s)_j v[b,kh,j]      kh = h / (H / Hkv): grouped heads indexed
// The keys lo..p of a query are dealt into SPLIT partitions (partition r: j = lo + r,
// lo + r + SPLIT, ... up to p, read from the buffer), so the work follows the filled prefix, not
// N, and rows past p are never read. Each partition is an online softmax: its max m, its sum s of
// exp(s_j - m) and its exp-weighted sum a of v rows, rescaled by exp(m_old - m) when the max
// grows. The partitions are merged by a fixed tree, the upper half folded onto the lower (r with
// r + half, half = SPLIT/2, ..., 1), each merge (m1, s1, a1) + (m2, s2, a2) -> M = max(m1, m2),
// f_i = exp(m_i - M) (1 where m_i = M: an empty partition's -inf too), s = s1 f1 + s2 f2,
// a = a1 f1 + a2 f2; out = a * recip_newton(s) (no division: the reference's bits).
// COOP lanes share a query (lane l of them owns partitions l + k COOP), QW queries a workgroup
// (query q = (b * H + h) * T + t, workgroup x + y * its x count, slot = lane / COOP):
//   GPUs          COOP = SPLIT, QW = 1: a workgroup a query, a lane a partition
//   CPU drivers   decode (few queries) COOP = a subgroup's worth, QW = 1; many queries (a
//                 prefill) COOP = 1, QW = a subgroup's worth: a lane a query, no shared memory
//                 and no barriers (on llvmpipe shared memory at lane-varying addresses is a
//                 loop over the lanes: a tree through it took 4/5 of a 128-query prefill)
// The tree's levels with half >= COOP join partitions of one lane, in registers: the lane takes
// its partitions in bit-reversed k and merges as a binary counter carries (a stack of STACK
// states); the rest go through shared memory. So every float sum runs in an order set by SPLIT
// alone, not by COOP, QW, the subgroup size or the device (tests: the same bits at any of them);
// `precise` keeps the compiler from contracting products and sums into FMAs. exp is exp_f32,
// tanh tanh_f32 (float_math.glsl), of s_j times the host's f32(1 / softcap).
// The dot product sums q*k in 4 partial sums over d % 4 (d = 4i + c, i ascending), then
// (c0 + c1) + (c2 + c3); D and DV are specialization constants (the loops over them unroll).
// A row of q or a cache is read as vec4s where D (DV) % 4 == 0 (every row starts on one), else
// word by word.
// TEXEL: q and the caches through texel fetches (texel.glsl), the float bits as ints.
// Q8: the caches are int8 (attention_cached_q8, vkq/ops/kv_q8.py): row j of D4 (DV4) Int8x4
// words then its float32 scale, ks_j (vs_j); each scale is taken out of its row's sums:
//   s_j = ftz(ftz(dot(q, f32(qk_j)) * ks_j) * scale),  a += ftz(e_j * vs_j) * f32(qv_j)
// (the dot's order as above; s sums e_j). A row is D4 + 1 words: word loads, not vec4s.
// tokens_first: out is written (B, T, H, DV), the head merge's transpose folded in
// (vkq/ops/attention_cached.py fold_head_transposes).
//! variant
//! variant TEXEL
//! variant Q8
//! variant Q8 TEXEL
#include "common.glsl"
#include "float_math.glsl"
#include "int8x4.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int COOP = 8;     // lanes a query, a power of two <= SPLIT
layout(constant_id = 4) const int D = 64;       // head dim of q and k
layout(constant_id = 5) const int DV = 64;      // head dim of v
layout(constant_id = 6) const int SPLIT = 64;   // key partitions, a power of two: the order of the sums
layout(constant_id = 7) const int STACK = 4;    // log2(SPLIT / COOP) + 1 <= 7: a lane's states held at once
layout(constant_id = 8) const int QW = 1;       // queries a workgroup (its width is COOP * QW)
const int D4 = (D + 3) / 4;
const int DV4 = (DV + 3) / 4;
#define NEG_INF (-uintBitsToFloat(0x7F800000u))

IVEC4_WORDS_INPUT(0, qb)
IVEC4_WORDS_INPUT(1, kc)
IVEC4_WORDS_INPUT(2, vc)
layout(std430, binding = 3) readonly buffer Pos { int positions[]; };
layout(std430, binding = 4) writeonly buffer Out { float o[]; };
layout(std430, binding = 4) writeonly buffer Out4 { vec4 o4[]; };   // the same words (DV % 4 == 0: rows on vec4s)
layout(push_constant) uniform Params {
    int B, H, T, N, Hkv, window;
    float scale, softcap;                // softcap 0: none
    int tokens_first;
    float inv_softcap;                   // f32(1 / softcap), the host's
} p;

shared float red_m[COOP > 1 ? COOP * QW : 1];   // lane i's state (its partitions merged) at i
shared float red_s[COOP > 1 ? COOP * QW : 1];
shared vec4 red_a[COOP > 1 ? COOP * QW * DV4 : 1];   // its vector at i * DV4 (the host keeps it <= 16 KiB)

// A lane's states: the stack of the merges within the lane, held in separate arrays indexed by
// constants (a switch on the depth): an array indexed by a variable is a loop over the lanes on
// llvmpipe, which made each partition cost ~6000 cycles.
float st_m[7], st_s[7];
vec4 sa0[DV4], sa1[DV4], sa2[DV4], sa3[DV4], sa4[DV4], sa5[DV4], sa6[DV4];
vec4 acc[DV4];             // the partition at hand (its sums are precise where they are written)

#define PUT_CASE(k) case k: if (k < STACK) [[unroll]] for (int c = 0; c < DV4; ++c) sa##k[c] = acc[c]; break;
void put(int depth) {
    switch (depth) { PUT_CASE(0) PUT_CASE(1) PUT_CASE(2) PUT_CASE(3) PUT_CASE(4) PUT_CASE(5) PUT_CASE(6) }
}

// acc = stack[depth] * f1 + acc * f2
#define MERGE_CASE(k) case k: if (k < STACK) [[unroll]] for (int c = 0; c < DV4; ++c) { \
    precise vec4 a = sa##k[c] * f1 + acc[c] * f2; acc[c] = a; } break;
void merge_into(int depth, float f1, float f2) {
    switch (depth) { MERGE_CASE(0) MERGE_CASE(1) MERGE_CASE(2) MERGE_CASE(3) MERGE_CASE(4) MERGE_CASE(5) MERGE_CASE(6) }
}

float factor(float m, float mx) { return m == mx ? 1.0 : ftz(exp_f32(m - mx)); }

// vec4 i of a row of `width` values starting at word `base` of q (which 0), k (1) or v (2),
// zeros past width
ivec4 load4(int which, int i) { return which == 0 ? LOAD4(qb, i) : which == 1 ? LOAD4(kc, i) : LOAD4(vc, i); }
int word(int which, int w) { return which == 0 ? WORD(qb, w) : which == 1 ? WORD(kc, w) : WORD(vc, w); }

#ifdef Q8
const int KW = D4 + 1, VW = DV4 + 1;    // words a cache row: the packed values, then the scale
vec4 q8_4(int which, int w) { return vec4(unpack_int8x4(word(which, w))); }
float q8_scale(int which, int w) { return intBitsToFloat(word(which, w)); }
#endif

vec4 row4(int which, int base, int i, int width) {
    if (width % 4 == 0) return intBitsToFloat(load4(which, base / 4 + i));
    vec4 r;
    [[unroll]] for (int c = 0; c < 4; ++c) {
        const float x = intBitsToFloat(word(which, base + min(4 * i + c, width - 1)));
        r[c] = 4 * i + c < width ? x : 0.0;
    }
    return r;
}

void main() {
    const int lid = int(gl_LocalInvocationID.x), l = lid % COOP, slot = lid / COOP;
    const int qi = int(gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * QW + slot;
    const int nq = p.B * p.H * p.T;
    const int qc = min(qi, nq - 1);                      // a slot past the last query: not stored
    const int t = qc % p.T, h = (qc / p.T) % p.H, b = qc / (p.T * p.H);
    const int kh = h / (p.H / p.Hkv);
    const int pos = qi < nq ? clamp(positions[t], 0, p.N - 1) : -1;   // the reference refuses one outside [0, N)
    const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int row0 = (b * p.Hkv + kh) * p.N;             // cache row of j = 0

    vec4 qv[D4];
    [[unroll]] for (int i = 0; i < D4; ++i) qv[i] = row4(0, qc * D, i, D);

    const int own = SPLIT / COOP, bits = STACK - 1;      // partitions a lane, log2 of it
    int top = 0;                                         // states on the stack
    for (int i = 0; i < own; ++i) {
        const int k = bits == 0 ? 0 : int(bitfieldReverse(uint(i)) >> uint(32 - bits));
        const int r = l + k * COOP;                      // partition r: keys lo + r, lo + r + SPLIT, ...
        float m = NEG_INF;
        precise float s = 0.0;
        [[unroll]] for (int c = 0; c < DV4; ++c) acc[c] = vec4(0.0);
        for (int j = lo + r; j <= pos; j += SPLIT) {
            precise vec4 d4 = vec4(0.0);
#ifdef Q8
            const int kb = (row0 + j) * KW, vb = (row0 + j) * VW;
            [[unroll]] for (int c = 0; c < D4; ++c) d4 += qv[c] * q8_4(1, kb + c);
            precise float dot = (d4.x + d4.y) + (d4.z + d4.w);
            precise float sk = ftz(dot * q8_scale(1, kb + D4)) * p.scale;
            float sc = ftz(sk);
#else
            [[unroll]] for (int c = 0; c < D4; ++c) d4 += qv[c] * row4(1, (row0 + j) * D, c, D);
            precise float sc = ((d4.x + d4.y) + (d4.z + d4.w)) * p.scale;
#endif
            if (p.softcap > 0.0) {                       // no division: f32(1/softcap) is pushed
                precise float capped = ftz(p.softcap * tanh_f32(ftz(sc * p.inv_softcap)));
                sc = capped;
            }
            if (sc > m) {                                // a new max: rescale what the partition holds
                const float f = ftz(exp_f32(m - sc));    // exp(-inf) = 0 at its first key
                s *= f;
                [[unroll]] for (int c = 0; c < DV4; ++c) acc[c] *= f;
                m = sc;
            }
            const float e = ftz(exp_f32(sc - m));      // (flushed: a device may flush a subnormal)
            s += e;
#ifdef Q8
            precise float ev = e * q8_scale(2, vb + DV4);
            const float w = ftz(ev);
            [[unroll]] for (int c = 0; c < DV4; ++c) {
                precise vec4 a = acc[c] + w * q8_4(2, vb + c);
                acc[c] = a;
            }
#else
            [[unroll]] for (int c = 0; c < DV4; ++c) {
                precise vec4 a = acc[c] + e * row4(2, (row0 + j) * DV, c, DV);
                acc[c] = a;
            }
#endif
        }
        for (int n = i; (n & 1) != 0; n >>= 1) {         // merge with the stack's top: a carry
            --top;
            const float mx = max(st_m[top], m), f1 = factor(st_m[top], mx), f2 = factor(m, mx);
            s = st_s[top] * f1 + s * f2;
            merge_into(top, f1, f2);
            m = mx;
        }
        st_m[top] = m;
        st_s[top] = s;
        put(top);
        ++top;
    }                                                    // top = 1: the lane's partitions merged in sa0
    const int obase = (p.tokens_first != 0 ? (b * p.T + t) * p.H + h : qc) * DV;
    if (COOP == 1) {                                     // a lane a query: done
        const float inv = recip_newton(st_s[0]);         // (s >= 1: the max key's weight is 1; no division)
        if (qi < nq) {
            if (DV % 4 == 0)                             // vec4 stores (a store is a loop over the lanes on llvmpipe)
                [[unroll]] for (int c = 0; c < DV4; ++c) { precise vec4 y = sa0[c] * inv; o4[obase / 4 + c] = y; }
            else
                [[unroll]] for (int d = 0; d < DV; ++d) { precise float y = sa0[d >> 2][d & 3] * inv; o[obase + d] = y; }
        }
        return;
    }
    const int me = slot * COOP + l;
    red_m[me] = st_m[0];
    red_s[me] = st_s[0];
    [[unroll]] for (int c = 0; c < DV4; ++c) red_a[me * DV4 + c] = sa0[c];
    barrier();
    for (int half_ = COOP / 2; half_ > 0; half_ >>= 1) {   // lanes l < half_ merge l + half_ in
        if (l < half_) {
            const int u = me + half_;
            const float mx = max(red_m[me], red_m[u]), f1 = factor(red_m[me], mx), f2 = factor(red_m[u], mx);
            precise float s = red_s[me] * f1 + red_s[u] * f2;
            red_s[me] = s;
            red_m[me] = mx;
            [[unroll]] for (int c = 0; c < DV4; ++c) {
                precise vec4 a = red_a[me * DV4 + c] * f1 + red_a[u * DV4 + c] * f2;
                red_a[me * DV4 + c] = a;
            }
        }
        barrier();
    }
    const int first = slot * COOP;                       // the query's root
    const float inv = recip_newton(red_s[first]);
    if (qi < nq) {
        if (DV % 4 == 0)
            for (int c = l; c < DV4; c += COOP) { precise vec4 y = red_a[first * DV4 + c] * inv; o4[obase / 4 + c] = y; }
        else
            for (int d = l; d < DV; d += COOP) { precise float y = red_a[first * DV4 + (d >> 2)][d & 3] * inv; o[obase + d] = y; }
    }
}

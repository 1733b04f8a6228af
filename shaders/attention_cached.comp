#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Attention of new queries over a static KV cache, its filled prefix only (vkq/ops/attention_cached.py):
//   p = positions[t] (clamped to [0, N)), lo = window > 0 ? max(0, p - window + 1) : 0
//   s_j = dot(q[b,h,t], k[b,kh,j]) * scale   (softcap > 0: softcap * tanh(s_j / softcap))
//   out[b,h,t] = sum_{j=lo..p} softmax(s)_j v[b,kh,j]      kh = h / (H / Hkv): grouped heads indexed
// A workgroup owns one (b, h, t) (workgroup x = t, y = h, z = b), whatever T is: a decode step's
// single query uses the whole workgroup. Lane l takes keys j = lo + l, lo + l + LOCAL, ... up to
// p (read from the buffer, uniform over the workgroup): the work follows the filled prefix, not
// N, and rows past p are never read. Each lane runs an online softmax over its keys (its max m,
// its sum of exp(s_j - m) and its exp-weighted sum of v rows, rescaled by exp(m_old - m) when the
// max grows), then the workgroup takes the max of the lanes' maxima, each lane scales its sum and
// vector by exp(m_lane - m), and a shared-memory tree over the LOCAL lanes (pairs l, l + half,
// halves LOCAL/2, ..., 1) adds them, CH4 vec4s of the vectors at a time (16 KiB of shared memory
// at most). So every sum runs in an order set by LOCAL alone (vkq/ops/attention_cached.py: 64),
// not by the subgroup size or the device; `precise` keeps the compiler from contracting the
// products and sums into FMAs. exp is exp_f32, tanh tanh_f32 (float_math.glsl).
// The dot product sums q*k in 4 partial sums over d % 4 (d = 4i + c, i ascending), then
// (c0 + c1) + (c2 + c3); D and DV are specialization constants (the loops over them unroll).
// A cache row is read as vec4s where D (DV) % 4 == 0 (every row starts on one), else word by word.
// TEXEL: the caches through texel fetches (texel.glsl), the float bits as ints.
//! variant
//! variant TEXEL
#include "common.glsl"
#include "float_math.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two
layout(constant_id = 4) const int D = 64;       // head dim of q and k
layout(constant_id = 5) const int DV = 64;      // head dim of v
const int D4 = (D + 3) / 4;
const int DV4 = (DV + 3) / 4;
#define NEG_INF (-uintBitsToFloat(0x7F800000u))

layout(std430, binding = 0) readonly buffer Q { float q[]; };
IVEC4_WORDS_INPUT(1, kc)
IVEC4_WORDS_INPUT(2, vc)
layout(std430, binding = 3) readonly buffer Pos { int positions[]; };
layout(std430, binding = 4) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params {
    int H, T, N, Hkv, window;
    float scale, softcap;                // softcap 0: none
} p;

shared float red_m[LOCAL];
shared float red_s[LOCAL];
const int CH4 = DV4 < 16 ? DV4 : 16;     // vec4s of each lane's vector a step of the final tree takes
shared vec4 red_v[LOCAL * CH4];          // lane l's part at l * CH4 (16 KiB at most)

// vec4 i of a row of `width` values starting at word `base` (zeros past width)
vec4 row4(bool k, int base, int i, int width) {
    if (width % 4 == 0) return intBitsToFloat(k ? LOAD4(kc, base / 4 + i) : LOAD4(vc, base / 4 + i));
    vec4 r;
    [[unroll]] for (int c = 0; c < 4; ++c) {
        const int w = base + min(4 * i + c, width - 1);
        const float x = intBitsToFloat(k ? WORD(kc, w) : WORD(vc, w));
        r[c] = 4 * i + c < width ? x : 0.0;
    }
    return r;
}

void main() {
    const int t = int(gl_WorkGroupID.x), h = int(gl_WorkGroupID.y), b = int(gl_WorkGroupID.z);
    const int l = int(gl_LocalInvocationID.x);
    const int kh = h / (p.H / p.Hkv);
    const int pos = clamp(positions[t], 0, p.N - 1);     // the reference refuses one outside [0, N)
    const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int row0 = (b * p.Hkv + kh) * p.N;             // cache row of j = 0

    vec4 qv[D4];                                         // the same for every lane: uniform loads
    const int qbase = ((b * p.H + h) * p.T + t) * D;
    [[unroll]] for (int i = 0; i < D4; ++i)
        [[unroll]] for (int c = 0; c < 4; ++c) qv[i][c] = 4 * i + c < D ? q[qbase + min(4 * i + c, D - 1)] : 0.0;

    float m = NEG_INF, s = 0.0;
    vec4 acc[DV4];
    [[unroll]] for (int i = 0; i < DV4; ++i) acc[i] = vec4(0.0);
    for (int j = lo + l; j <= pos; j += LOCAL) {
        precise vec4 d4 = vec4(0.0);
        [[unroll]] for (int i = 0; i < D4; ++i) d4 += qv[i] * row4(true, (row0 + j) * D, i, D);
        precise float sc = ((d4.x + d4.y) + (d4.z + d4.w)) * p.scale;
        if (p.softcap > 0.0) sc = p.softcap * tanh_f32(sc / p.softcap);
        if (sc > m) {                                    // a new max: rescale what the lane holds
            precise float c = exp_f32(m - sc);           // exp(-inf) = 0 at the lane's first key
            s *= c;
            [[unroll]] for (int i = 0; i < DV4; ++i) acc[i] *= c;
            m = sc;
        }
        precise float e = exp_f32(sc - m);
        s += e;
        [[unroll]] for (int i = 0; i < DV4; ++i) acc[i] += e * row4(false, (row0 + j) * DV, i, DV);
    }

    red_m[l] = m;                                        // the workgroup's max: exact in any order
    barrier();
    for (int half_ = LOCAL / 2; half_ > 0; half_ >>= 1) {
        if (l < half_) red_m[l] = max(red_m[l], red_m[l + half_]);
        barrier();
    }
    const float mx = red_m[0];
    precise float f = exp_f32(m - mx);                   // a lane without keys: exp(-inf) = 0 (s, acc 0)
    red_s[l] = s * f;
    [[unroll]] for (int c0 = 0; c0 < DV4; c0 += CH4) {   // CH4 vec4s of the lanes' vectors at a time
        if (c0 > 0) barrier();                           // the last chunk's sums are stored
        [[unroll]] for (int i = 0; i < CH4; ++i) red_v[l * CH4 + i] = acc[min(c0 + i, DV4 - 1)] * f;
        barrier();
        for (int half_ = LOCAL / 2; half_ > 0; half_ >>= 1) {   // lane pairs (r, r + half_), r < half_
            if (c0 == 0 && l < half_) red_s[l] += red_s[l + half_];
            for (int w = l; w < half_ * CH4; w += LOCAL) {       // their half_ * CH4 vec4 sums over all lanes
                const int r = w / CH4, i = w - r * CH4;
                red_v[r * CH4 + i] += red_v[(r + half_) * CH4 + i];
            }
            barrier();
        }
        const float total = red_s[0];
        const int obase = ((b * p.H + h) * p.T + t) * DV + 4 * c0;
        for (int d = l; d < 4 * CH4 && 4 * c0 + d < DV; d += LOCAL) o[obase + d] = red_v[d >> 2][d & 3] / total;
    }
}

#ifndef VKQ_KV_Q8_GLSL
#define VKQ_KV_Q8_GLSL
// One row of the int8 KV cache (vkq/ops/kv_q8.py is the specification): D float32 values ->
// W + 1 int32 words, W = ceil(D / 4):
//   amax = max_d |x_d|                           (exact: a max)
//   scale = min(ftz(amax * f32(1/127)), 2^100)   (one IEEE multiply; 2^100 keeps recip_newton's
//                                                steps normal)
//   inv = scale > 0 ? recip_newton(scale) : 0    (no division: float_exact.glsl)
//   q_d = clamp(roundEven(x_d * inv), -127, 127)
//   words 0..W-1: q Int8x4 (byte d % 4 of word d / 4, zero bytes past D), word W: scale's bits
// A row holding a NaN or an infinity: every q 0 and scale NaN (attention over it gives NaN, as
// a float cache's would). The including shader defines, before including this file,
//   const int D                           the row's length
//   float kv_q8_in(int i)                 value i of its input
//   void kv_q8_out(int i, int word)       word i of its output
// kv_quantize.comp writes the rows to a tensor of their own, index_copy_rows.comp (Q8) into
// the cache at their positions.
#include "int8x4.glsl"
#include "float_exact.glsl"

const int KV_Q8_W = (D + 3) / 4;

void kv_q8_row(int from, int to) {
    float amax = 0.0;
    bool finite = true;
    for (int d = 0; d < D; ++d) {
        const float v = kv_q8_in(from + d);
        finite = finite && (floatBitsToInt(v) & 0x7f800000) != 0x7f800000;
        amax = max(amax, abs(v));
    }
    precise float scaled = amax * uintBitsToFloat(0x3C010204u);     // f32(1/127)
    const float scale = min(ftz(scaled), uintBitsToFloat(0x71800000u));   // 2^100
    const float inv = scale > 0.0 ? recip_newton(scale) : 0.0;
    for (int w = 0; w < KV_Q8_W; ++w) {
        ivec4 q = ivec4(0);
        [[unroll]] for (int c = 0; c < 4; ++c) {
            const int d = 4 * w + c;
            if (d < D && finite) {
                precise float y = kv_q8_in(from + d) * inv;
                q[c] = int(clamp(roundEven(y), -127.0, 127.0));
            }
        }
        kv_q8_out(to + w, pack_int8x4(q));
    }
    kv_q8_out(to + KV_Q8_W, finite ? floatBitsToInt(scale) : int(0x7fc00000u));
}
#endif

#ifndef VKQ_INT4_GROUPS_GLSL
#define VKQ_INT4_GROUPS_GLSL
// The int4 linears' shared arithmetic (linear_int4.comp, the GEMV; linear_int4_gemm.comp, the
// GEMM), on 4 columns at a time (one vec4 / ivec4 component a column), so that both kernels do
// vkq/ops/linear_int4.py's operations in its order. Packing (vkq/int4.py): value 8i + t of a
// column is nibble t / 4 of byte t % 4 of its word i. Needs OFFSET defined or not as the kernel.

// value 8i + t of the 4 columns of `word` (word i of each), as integers 0..15
ivec4 nibble(ivec4 word, int t) { return (word >> (8 * (t % 4) + 4 * (t / 4))) & 15; }

// X_F32: a group's term t = A * s [+ B * m] (OFFSET: B the sum of the group's x)
vec4 group_term_f32(vec4 a, vec4 s, float b, vec4 m) {
    precise vec4 t = a * s;
#ifdef OFFSET
    precise vec4 tb = vec4(b) * m;
    precise vec4 t2 = t + tb;
    t = t2;
#endif
    return t;
}

// X_Q8: A = P - z X - xzp (U - n z), exact (P = sum q u, X = sum q, U = sum u over the group's
// values, n of them real); t = f32(A) * s [+ f32(X - n xzp) * m]
vec4 group_term_q8(ivec4 p, int x, ivec4 u, ivec4 z, int xzp, int n, vec4 s, vec4 m) {
    ivec4 a = p - z * x - xzp * (u - n * z);
    precise vec4 t = vec4(a) * s;
#ifdef OFFSET
    precise vec4 tb = vec4(float(x - n * xzp)) * m;
    precise vec4 t2 = t + tb;
    t = t2;
#endif
    return t;
}

#ifdef DOT
// (word & 0x0F0F0F0F) holds values 8i..8i+3 of each column as bytes, ((word >> 4) & 0x0F0F0F0F)
// values 8i+4..8i+7: with xa, xb a row's x words of k 8i..+3 and 8i+4..+7, acc + sum x u
ivec4 dot_word(int xa, int xb, ivec4 word, ivec4 acc) {
    ivec4 lo = word & 0x0F0F0F0F, hi = (word >> 4) & 0x0F0F0F0F;
    return ivec4(dot4x8_acc(xb, hi.x, dot4x8_acc(xa, lo.x, acc.x)), dot4x8_acc(xb, hi.y, dot4x8_acc(xa, lo.y, acc.y)),
                 dot4x8_acc(xb, hi.z, dot4x8_acc(xa, lo.z, acc.z)), dot4x8_acc(xb, hi.w, dot4x8_acc(xa, lo.w, acc.w)));
}
// acc + each column's 4-byte dot product of its word in `words` with the word x (signed bytes)
ivec4 dot_bytes(ivec4 words, int x, ivec4 acc) {
    return ivec4(dot4x8_acc(x, words.x, acc.x), dot4x8_acc(x, words.y, acc.y), dot4x8_acc(x, words.z, acc.z),
                 dot4x8_acc(x, words.w, acc.w));
}
#endif

// W8 (GGUF Q8_0: int8 values, 4 a word): value 8i + t of the 4 columns is byte t % 4 of word
// 2i (t < 4) or 2i + 1 of each, sign-extended
ivec4 byte_value(ivec4 wa, ivec4 wb, int t) { return bitfieldExtract(t < 4 ? wa : wb, 8 * (t % 4), 8); }

// the sum of a word's 8 values, each column (SWAR: the bytes of lo + hi hold pair sums <= 30)
ivec4 nibble_sum(ivec4 word) {
    ivec4 us = (word & 0x0F0F0F0F) + ((word >> 4) & 0x0F0F0F0F);
    us += us >> 8;
    us += us >> 16;
    return us & 0xFF;
}
#endif

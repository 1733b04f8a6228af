#ifndef VKQ_LINEAR_STORE_GLSL
#define VKQ_LINEAR_STORE_GLSL
// The epilogue shared by the int8 GEMM kernels (linear_q8.comp, linear_gemv.comp): one 4 x 4
// block of int32 accumulators -> the output, in one of the modes
//   OUT_Q8               out = requantize(acc + bias_eff[n], m[n], s[n], out_zp, qmin, qmax, frac[n]) (4H4W),
//                        as requantize_clamped with the host's per-column constants (the bias
//                        fraction always added: a few operations an output, next to K multiply-adds)
//   OUT_F32              out = f32(acc + corr[n]) * scale[n] + bias[n]                    (row-major)
//   OUT_F32 ROW_QPARAMS  out = f32(acc - zp[r] * wsum[n]) * (row_scale[r] * w_scale[n]) + bias[n],
//                        then linear_dynamic's float epilogue by the specialization constant EPI
//                        (vkq/passes/fuse_float_epilogue.py): 0 none, 1 silu_f32(out),
//                        2 out + other[r, n] (a residual add), 3 out * other[r, n] (silu(gate) * up),
//                        each rounded once, as the float ops it replaces: their bits
//   OUT_Q8 LUT           out = table[out + 128] after the requantization (a fused lut_q8:
//                        vkq/passes/fuse_epilogue.py), the table at binding 4 (lut_lookup.glsl)
//   OUT_Q8 DEQUANT       out = f32(q - p.deq_zp) * p.deq_scale (row-major), q the int8 result
//                        above: a network's final dequantize folded in (fuse_epilogue.py), as
//                        shaders/dequantize.comp computes it
// The including shader declares the buffers chan (an IVEC4_INPUT: 4 ivec4 per column block),
// out_q / out_f, rowq, and the push constants p.H (rows of each batch matrix), p.N, p.out_zp,
// p.qmin, p.qmax, p.deq_scale, p.deq_zp; with ROW_QPARAMS also EPI and other_f (binding 5, the
// output's shape; any buffer where EPI < 2) and float_math.glsl.
// store_block is straight-line code (16 requantizations; rolled loops over rr and b index the
// vectors by a variable: 3% slower on lavapipe); the callers call it from rolled loops, one copy
// of its code (SwiftShader compiles an unrolled TM x TN epilogue for seconds). cw: the column
// block's 4 chan ivec4 (chan_block), loaded once per column block, not once per row block.
// STORE_N / STORE_F(i, v): the output's columns and its float store; p.N and out_f[i] = v unless
// the including shader defines them (linear_gemv.comp PARTS: one of several outputs).
#ifndef STORE_N
#define STORE_N p.N
#define STORE_F(i, v) out_f[i] = (v)
#endif

#ifdef LUT
#define LUT_BINDING 4
#include "lut_lookup.glsl"
#endif

ivec4[4] chan_block(int nb) {
    return ivec4[4](LOAD4(chan, 4 * nb), LOAD4(chan, 4 * nb + 1), LOAD4(chan, 4 * nb + 2), LOAD4(chan, 4 * nb + 3));
}

#ifdef ROW_QPARAMS
// EPI_NOW / OTHER(i): the epilogue and its other operand; EPI and other_f[i] unless the including
// shader defines them (linear_gemv.comp GLU: silu for the gate, then up times the gate it wrote)
#ifndef EPI_NOW
#define EPI_NOW EPI
#define OTHER(i) other_f[i]
#endif
float epilogue(float y, int i) {
    if (EPI_NOW == 1) return silu_f32(y);
    if (EPI_NOW == 2) { precise float z = y + OTHER(i); return z; }
    if (EPI_NOW == 3) { precise float z = y * OTHER(i); return z; }
    return y;       // (other_f, then any buffer, is not read)
}
#else
float epilogue(float y, int i) { return y; }
#endif

// a[rr][b]: the accumulator of packed row 4rb + rr (batch rows at b*Hp + h), column 4nb + b.
// Padding rows and columns are written 0 (OUT_Q8) or not at all (OUT_F32, DEQUANT).
void store_block(int rb, int nb, ivec4 a[4], ivec4 cw[4]) {
    int Hp = up4(p.H), N4 = up4(STORE_N) / 4;
    ivec4 c0 = cw[0], c1 = cw[1], c2 = cw[2], c3 = cw[3];
    bvec4 col_ok = lessThan(4 * nb + ivec4(0, 1, 2, 3), ivec4(STORE_N));
#ifdef OUT_Q8
    ivec4 bias = ivec4(c0.x, c1.x, c2.x, c3.x), bound = ivec4(c0.y, c1.y, c2.y, c3.y);
    ivec4 m = ivec4(c0.z, c1.z, c2.z, c3.z), sh = ivec4(c0.w, c1.w, c2.w, c3.w);
    ivec4 lsh = sh & 31, rsh = (sh >> 5) & 31, frac = sh & ~1023, words;   // vkq/quant.py:shift_word
    const int h0 = (4 * rb) % Hp;
    [[unroll]] for (int rr = 0; rr < 4; ++rr) {
        ivec4 acc = a[rr] + bias, q;
        [[unroll]] for (int b = 0; b < 4; ++b) {
            q[b] = requantize_clamped(acc[b], bound[b], lsh[b], m[b], rsh[b], frac[b], p.out_zp, p.qmin, p.qmax,
                                      true, true);
#ifdef LUT
            q[b] = lut_lookup(q[b]);
#endif
        }
        bool row_ok = h0 + rr < p.H;
        q = row_ok ? mix(ivec4(0), q, col_ok) : ivec4(0);
#ifdef DEQUANT
        if (row_ok) {
            int row = (4 * rb + rr) / Hp * p.H + (4 * rb + rr) % Hp;   // row in the (batch * H, N) output
            precise vec4 y = vec4(q - p.deq_zp) * p.deq_scale;
            for (int b = 0; b < 4; ++b)
                if (col_ok[b]) STORE_F(row * STORE_N + 4 * nb + b, y[b]);
        }
#else
        words[rr] = pack_int8x4(q);
#endif
    }
#ifndef DEQUANT
    STORE4(out_q, rb * N4 + nb, words);
#endif
#else
    for (int rr = 0; rr < 4; ++rr) {
        int prow = 4 * rb + rr, h = prow % Hp;
        if (h >= p.H) continue;
        int row = prow / Hp * p.H + h;   // row in the (batch * H, N) float output
        ivec4 acc = a[rr];
        vec4 scale = intBitsToFloat(ivec4(c0.y, c1.y, c2.y, c3.y));
#ifdef ROW_QPARAMS
        vec2 rq = rowq[row];
        acc -= int(rq.y) * ivec4(c0.x, c1.x, c2.x, c3.x);
        precise vec4 sc = rq.x * scale;
        scale = sc;
#else
        acc += ivec4(c0.x, c1.x, c2.x, c3.x);
#endif
        precise vec4 y = vec4(acc) * scale + intBitsToFloat(ivec4(c0.z, c1.z, c2.z, c3.z));
        for (int b = 0; b < 4; ++b)
            if (col_ok[b]) STORE_F(row * STORE_N + 4 * nb + b, epilogue(y[b], row * STORE_N + 4 * nb + b));
    }
#endif
}
#endif

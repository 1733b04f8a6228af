#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Batched float32 matmul with numpy's broadcasting of batch dims (vkq/ops/float.py matmul):
//   out[z, i, j] = sum_k a[oa(z) + i*sam + k*sak] * b[ob(z) + k*sbk + j*sbn]
// out is contiguous (batches, M, N); z runs over the batches (workgroup z), oa/ob from the
// merged batch shape and each operand's batch strides (0 where it is broadcast). Strides let
// a transposed operand be read in place. An invocation owns a TM x TN block of out and
// accumulates in float32 in k order (the reference's order differs: results agree to
// ~K ulp of sum_k |a b|).
#include "common.glsl"

layout(constant_id = 3) const int TM = 4;
layout(constant_id = 4) const int TN = 4;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params {
    int M, N, K;
    int sam, sak, sbk, sbn;
    int nb;                           // batch rank after merging (<= 4)
    int bshape[4], sab[4], sbb[4];    // batch shape, a's and b's batch strides
} p;

void main() {
    int z = int(gl_WorkGroupID.z);
    int oa = 0, ob = 0, t = z;
    for (int d = p.nb - 1; d >= 0; --d) {
        int j = t % p.bshape[d];
        t /= p.bshape[d];
        oa += j * p.sab[d];
        ob += j * p.sbb[d];
    }
    int i0 = int(gl_GlobalInvocationID.y) * TM, j0 = int(gl_GlobalInvocationID.x) * TN;
    if (i0 >= p.M || j0 >= p.N) return;

    int ra[TM], cb[TN];   // rows past M / columns past N re-read the last one (not stored)
    [[unroll]] for (int r = 0; r < TM; ++r) ra[r] = oa + min(i0 + r, p.M - 1) * p.sam;
    [[unroll]] for (int c = 0; c < TN; ++c) cb[c] = ob + min(j0 + c, p.N - 1) * p.sbn;

    float acc[TM][TN];
    [[unroll]] for (int r = 0; r < TM; ++r)
        [[unroll]] for (int c = 0; c < TN; ++c) acc[r][c] = 0.0;

    for (int k = 0; k < p.K; ++k) {
        float av[TM], bv[TN];
        [[unroll]] for (int r = 0; r < TM; ++r) av[r] = a[ra[r] + k * p.sak];
        [[unroll]] for (int c = 0; c < TN; ++c) bv[c] = b[cb[c] + k * p.sbk];
        [[unroll]] for (int r = 0; r < TM; ++r)
            [[unroll]] for (int c = 0; c < TN; ++c) acc[r][c] += av[r] * bv[c];
    }

    int out0 = z * p.M * p.N;
    [[unroll]] for (int r = 0; r < TM; ++r) {
        if (i0 + r >= p.M) break;
        [[unroll]] for (int c = 0; c < TN; ++c)
            if (j0 + c < p.N) o[out0 + (i0 + r) * p.N + j0 + c] = acc[r][c];
    }
}

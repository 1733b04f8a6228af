#version 450
#extension GL_GOOGLE_include_directive : require
// torch.scatter / scatter_add / scatter_reduce / index_add / index_copy / index_fill
// (vkq/ops/logic.py: scatter is the specification), one output value an invocation, written as
// a gather: the invocation of out[c] reads x[c], then walks the index elements that could name
// it (those with c's coordinates off `dim`, j = 0 .. k-1 along it) in their order and combines
// the src value of each that does. So there are no atomics and no write races, the result is
// the one ATen's CPU kernels give (the last write wins, a sum accumulates from the first, each
// step one IEEE operation), and a device that lacks float atomics runs it too. Its cost is k
// index reads an output value: meant for a small k (top-k routing). CSR (index_add's 1-D index a
// constant: a graph's edge list): the lowering sorted the index's elements by the position they
// name, so each output value walks only its own, in order (a few edges a node of thousands).
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;
layout(constant_id = 4) const int MODE = 0;          // vkq.ops.logic.SCATTER_REDUCE's order
layout(constant_id = 5) const int INCLUDE_SELF = 1;  // 0: x[c] only where no index names c

//! variant
//! variant INT
//! variant CSR
//! variant INT CSR
#ifdef INT
#define T int
#define IS_NAN(v) false
#else
#define T float
#define IS_NAN(v) isnan(v)
#endif

layout(std430, binding = 0) readonly buffer X { T x[]; };
layout(std430, binding = 1) readonly buffer Index { int index[]; };
layout(std430, binding = 2) readonly buffer Src { T src[]; };
layout(std430, binding = 3) writeonly buffer Out { T o[]; };
#ifdef CSR
layout(std430, binding = 4) readonly buffer Lists { int lists[]; };   // offsets (size + 1), then each j
#endif
layout(push_constant) uniform Params {
    int n, rank, dim, k, size, unused;
    int shape[6];       // x's (= the output's)
    int istride[6];     // the index's strides (index_add's 1-D index: 1 at dim, 0 elsewhere)
    int sstride[6];     // src's strides (all 0: a scalar)
    int iext[6];        // the index's extent off dim: coordinates past it are never written
} p;

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int e = 0; e < PER && i < p.n; ++e, i += stride) {
        int ib = 0, sb = 0, target = 0, t = i;
        bool inside = true;
        for (int d = p.rank - 1; d >= 0; --d) {
            int s = p.shape[d], c = t % s;
            t /= s;
            if (d == p.dim) {
                target = c;
            } else {
                inside = inside && c < p.iext[d];
                ib += c * p.istride[d];
                sb += c * p.sstride[d];
            }
        }
        T acc = x[i];
        int count = 0;
#ifdef CSR
        int first = inside ? lists[target] : 0, last = inside ? lists[target + 1] : 0;
        for (int q = first; q < last; ++q) {
            int j = lists[p.size + 1 + q];
#else
        for (int j = 0; inside && j < p.k; ++j) {
            int at = index[ib + j * p.istride[p.dim]];
            if ((at < 0 ? at + p.size : at) != target)
                continue;
#endif
            T v = src[sb + j * p.sstride[p.dim]];
            if (MODE == 0 || (INCLUDE_SELF == 0 && count == 0))
                acc = v;
            else if (MODE == 1 || MODE == 3)
                acc += v;
            else if (MODE == 2)
                acc *= v;
            else if (MODE == 4)
                acc = (IS_NAN(v) || v > acc) ? v : acc;
            else
                acc = (IS_NAN(v) || v < acc) ? v : acc;
            ++count;
        }
        if (MODE == 3 && count > 0)
            acc = acc / T(count + INCLUDE_SELF);
        o[i] = acc;
    }
}

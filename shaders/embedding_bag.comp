#version 450
#extension GL_GOOGLE_include_directive : require
// nn.EmbeddingBag (vkq/ops/logic.py embedding_bag): out[b, d] = the sum / mean / max over the
// ids j of bag b, [offsets[b], offsets[b + 1]) (the last bag's to the end of the ids unless
// include_last_offset made offsets one longer), of table[ids[j], d] (times weights[j]), added in
// j's order as ATen's CPU kernel adds them; ids equal to padding_idx are skipped and not counted;
// an empty bag is 0. Offsets and ids are clamped into their buffers, so that no read leaves one
// (PyTorch raises on such values; the reference clamps the same). One invocation an output value:
// its loop runs over its bag (DeviceInfo.check_loop_budget bounds it by the ids' count).
//! variant MODE_SUM
//! variant MODE_SUM WEIGHTED
//! variant MODE_MEAN
//! variant MODE_MAX
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer Table { float table[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) readonly buffer Offsets { int offsets[]; };
layout(std430, binding = 3) readonly buffer Weights { float weights[]; };   // (WEIGHTED; else the table again)
layout(std430, binding = 4) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params {
    int n, D, rows;      // outputs (bags x D), the table's rows
    int count, bounds;   // ids, offsets
    int padding;         // padding_idx (-1: none)
} p;

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
        const int b = i / p.D, d = i - b * p.D;
        const int lo = clamp(offsets[b], 0, p.count);
        const int hi = clamp(b + 1 < p.bounds ? offsets[b + 1] : p.count, lo, p.count);
#ifdef MODE_MAX
        float acc = uintBitsToFloat(0xff800000u);
#else
        precise float acc = 0.0;
#endif
        int taken = 0;
        for (int j = lo; j < hi; ++j) {
            const int id = ids[j];
            if (id == p.padding) continue;
            precise float v = table[clamp(id, 0, p.rows - 1) * p.D + d];
#ifdef WEIGHTED
            v = v * weights[j];
#endif
#ifdef MODE_MAX
            acc = isnan(v) || v > acc ? v : acc;      // (a NaN row value wins, as ATen's max)
            if (isnan(acc)) break;
#else
            acc = acc + v;
#endif
            ++taken;
        }
#ifdef MODE_MEAN
        acc = taken > 0 ? acc / float(taken) : 0.0;
#else
        acc = taken > 0 ? acc : 0.0;
#endif
        o[i] = acc;
    }
}

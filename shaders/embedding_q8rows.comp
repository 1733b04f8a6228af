#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// embedding_q8rows (vkq/ops/embedding_q8.py): out[r, j] = float(table[id, j]) * scale[id] with
// id = clamp(ids[r], 0, rows - 1) for the n = R * H output values, R ids of rows of H int8 values.
// The table is W = ceil(H / 4) int32 words a row, Int8x4 (value j at byte j % 4 of word j / 4;
// int8x4.glsl). The id is clamped into the table, so that no read leaves the buffer (PyTorch raises
// on such an id; so does the reference). Invocations take blocks of 4 consecutive output values,
// PER blocks each (grid-strided), stored as one vec4 (texel.glsl); the last, partial block of
// an H % 4 != 0 output value by value. ALIGNED (H % 4 == 0): a block is one table word of one row,
// unpacked and multiplied by its scale as a vec4. Otherwise each value finds its row and column
// (the first by div_exact, the next by stepping along the row). One float multiply a value:
// exact on every device. TEXEL: the table through texel fetches (the device's choice).
//! variant
//! variant TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int PER = 4;
layout(constant_id = 4) const bool ALIGNED = true;

IVEC4_WORDS_INPUT(0, tw)
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) readonly buffer Scale { float scale[]; };
VEC4_OUTPUT(3, o4)
layout(std430, binding = 3) writeonly buffer Out { float o[]; };   // the last, partial block
layout(push_constant) uniform Params { int n, H, W, rows, R; } p;   // R ids

int row_of(int r) { return clamp(ids[r], 0, p.rows - 1); }

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();                   // block i: output values 4i .. 4i + 3
    for (int k = 0; k < PER && 4 * i < p.n; ++k, i += stride) {
        vec4 v;
        if (ALIGNED) {                             // W = H / 4 words a row, n = 4 * R * W
            const int r = div_exact(i, p.W), w = i - r * p.W, id = row_of(r);
            v = vec4(unpack_int8x4(WORD(tw, id * p.W + w))) * scale[id];
        } else {
            int r = div_exact(4 * i, p.H), j = 4 * i - r * p.H, id = row_of(r);
            [[unroll]] for (int c = 0; c < 4; ++c) {
                if (j == p.H) {                    // into the next row (past the last: its values unused)
                    j = 0;
                    id = row_of(min(++r, p.R - 1));
                }
                v[c] = float(int8_at(WORD(tw, id * p.W + (j >> 2)), j & 3)) * scale[id];
                ++j;
            }
        }
        if (4 * i + 4 <= p.n) {
            STORE_VEC4(o4, i, v);
        } else {
            for (int e = 4 * i; e < p.n; ++e) o[e] = v[e - 4 * i];
        }
    }
}

#ifndef VKQ_BLOCK_MASK_GLSL
#define VKQ_BLOCK_MASK_GLSL
// Which bytes of a packed ivec4 block hold real values: kernels that write whole blocks AND
// their result with this so that padding bytes stay 0. In both layouts the blocks run
//   block i = (outer * word_blocks + word_block) * byte_blocks + byte_block
//   4W4C: bytes are channels (C, C/4 blocks), words are widths (W, W/4 blocks)
//   4H4W: bytes are columns  (W, W/4 blocks), words are rows   (H, H/4 blocks)
// geo = (byte_dim, byte_blocks, word_dim, word_blocks); vkq/ops/eltwise.py:block_geometry.
// ROW (rank 5 and 6) has geo = (numel, 0, 0, 0): element f is byte f%4 of word f/4, so only the
// end is padding, and its last real word may be partial (which the blocked rule cannot say).

// the low n bytes of a word set, n clamped to [0, 4]
int byte_mask(int n) { return n >= 4 ? -1 : (1 << (8 * max(n, 0))) - 1; }

ivec4 block_mask(int i, ivec4 geo) {
    if (geo.y == 0) {
        int r = geo.x - 16 * i;     // the real elements from this block's first on
        return ivec4(byte_mask(r), byte_mask(r - 4), byte_mask(r - 8), byte_mask(r - 12));
    }
    int bytes = byte_mask(geo.x - 4 * (i % geo.y));
    int words = geo.z - 4 * ((i / geo.y) % geo.w);   // word j is real when j < words
    return mix(ivec4(0), ivec4(bytes), lessThan(ivec4(0, 1, 2, 3), ivec4(words)));
}
#endif

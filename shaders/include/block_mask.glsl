#ifndef VKQ_BLOCK_MASK_GLSL
#define VKQ_BLOCK_MASK_GLSL
// Which bytes of a packed ivec4 block hold real values: kernels that write whole blocks AND
// their result with this so that padding bytes stay 0. In both layouts the blocks run
//   block i = (outer * word_blocks + word_block) * byte_blocks + byte_block
//   4W4C: bytes are channels (C, C/4 blocks), words are widths (W, W/4 blocks)
//   4H4W: bytes are columns  (W, W/4 blocks), words are rows   (H, H/4 blocks)
// geo = (byte_dim, byte_blocks, word_dim, word_blocks); vkq/ops/eltwise.py:block_geometry.

// the low n bytes of a word set, n clamped to [0, 4]
int byte_mask(int n) { return n >= 4 ? -1 : (1 << (8 * max(n, 0))) - 1; }

ivec4 block_mask(int i, ivec4 geo) {
    int bytes = byte_mask(geo.x - 4 * (i % geo.y));
    int words = geo.z - 4 * ((i / geo.y) % geo.w);   // word j is real when j < words
    return mix(ivec4(0), ivec4(bytes), lessThan(ivec4(0, 1, 2, 3), ivec4(words)));
}
#endif

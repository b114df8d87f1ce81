// Host-side TMA map of the paged KV cache.
#include "common/tma.h"
#include "mla/dense_decode/params.h"

namespace hopperkit::mla {

CUtensorMap make_kv_cache_tma_map(const void* k_cache, bool is_bf16, int64_t num_blocks, int64_t num_heads_k,
                                  int64_t stride_block, int64_t stride_token, int64_t stride_head) {
  constexpr int kElem = 2;
  const uint64_t dims[4] = {576, static_cast<uint64_t>(num_heads_k), 64, static_cast<uint64_t>(num_blocks)};
  const uint64_t strides[3] = {static_cast<uint64_t>(stride_head) * kElem, static_cast<uint64_t>(stride_token) * kElem,
                               static_cast<uint64_t>(stride_block) * kElem};
  const uint32_t box[4] = {64, 1, 64, 1};
  return make_tma_nd<4>(k_cache, is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, dims,
                        strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace hopperkit::mla

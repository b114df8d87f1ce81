// Producer warpgroup of the dense decode kernel: Q tiles by plain async copies, KV tiles by TMA.
#pragma once

#include "common/sync.cuh"
#include "common/tma.cuh"
#include "mla/dense_decode/traits.h"
#include "mla/dense_decode/work.cuh"

namespace hopperkit::mla {

// Q rows of one 64-row tile are (s, g) pairs of one KV head: q[b, s, hk·G + g] for r = s·G + g. For
// a general G and strided q that is not a TMA box, so producer warps 1-3 copy it in 16-byte pieces
// into the swizzled layout TMA would produce. Rows past s_q·G are zero-filled (their scores are 0,
// never NaN, and are never stored).
template <class T>
__device__ __forceinline__ void load_q_tile(const DenseDecodeParams& p, typename T::SharedStorage& smem, int req,
                                            int m_tile, int head_k, int loader) {
  constexpr int kChunksPerRow = T::kHeadDimK * 2 / 16;  // 72
  constexpr int kChunksPerTileRow = T::kTileCols * 2 / 16;  // 8
  const auto* q = static_cast<const uint8_t*>(p.q);
  const uint32_t q_smem = cute::cast_smem_ptr_to_uint(&smem.q[0][0]);
  for (int idx = loader; idx < T::kBlockM * kChunksPerRow; idx += T::kQLoaderThreads) {
    const int r = idx / kChunksPerRow;
    const int c = idx % kChunksPerRow;
    const int row = m_tile * T::kBlockM + r;
    const bool valid = row < p.rows_per_kv;
    const int s = valid ? row / p.heads_per_kv : 0;
    const int g = valid ? row % p.heads_per_kv : 0;
    const uint8_t* src = q + 2 * (req * p.q_stride_b + s * p.q_stride_s + (head_k * p.heads_per_kv + g) * p.q_stride_h) +
                         16 * c;
    const int tile = c / kChunksPerTileRow;
    const int chunk = c % kChunksPerTileRow;
    const uint32_t dst = q_smem + tile * T::kTileBytes + r * 128 + ((chunk ^ (r & 7)) << 4);
    cp_async_16_zfill(dst, src, valid);
  }
  cp_async_wait_all();
  fence_shared_for_async_proxy();
}

// Issues the TMA loads of tiles [first, last] of a KV block into its buffer, each on its own
// barrier once the consumers have released that tile.
template <class T>
__device__ __forceinline__ void load_kv_tiles(const CUtensorMap* map, typename T::SharedStorage& smem,
                                              KvBlockSlot slot, int block_id, int head_k, int first, int last,
                                              CacheHint hint) {
  for (int t = first; t <= last; ++t) {
    smem.kv_empty[slot.buf][t].wait(slot.phase ^ 1);
    smem.kv_full[slot.buf][t].arrive_and_expect_tx(T::kTileBytes);
    tma_load_4d(map, reinterpret_cast<uint64_t*>(&smem.kv_full[slot.buf][t]), smem.kv[slot.buf][t],
                t * T::kTileCols, head_k, 0, block_id, hint);
  }
}

// Physical page of a request's logical block. Past the block table's width (a schedule built for
// other lengths) the page is -1: TMA reads an out-of-range box as zeros instead of faulting.
__device__ __forceinline__ int physical_block(const DenseDecodeParams& p, int req, int block) {
  return block < p.max_blocks ? p.block_table[req * p.block_table_stride + block] : -1;
}

// The KV tiles of a partition, in the order the consumers free them: in a pair step the left
// warpgroup releases the even block's tiles 0-3 and the right warpgroup the odd block's 4-7 in the
// middle of the step, the rest at its end. Issuing in that order puts the next step's first tiles in
// flight half a step earlier; the right warpgroup's scores walk tiles 4-7 first to match.
template <class T>
__device__ __forceinline__ void produce_kv(const DenseDecodeParams& p, const CUtensorMap* map,
                                           typename T::SharedStorage& smem, const DecodingSchedMeta& meta, int head_k) {
  const CacheHint hint = p.kv_evict_first ? CacheHint::kEvictFirst : CacheHint::kEvictNormal;
  int block_count = 0;
  for (int req = meta.begin_req; req <= meta.end_req; ++req) {
    const RequestChunk c = request_chunk(p, meta, req);
    const int n = c.num_blocks();
    for (int k = 0; k < n; k += 2) {
      const KvBlockSlot even(block_count + k);
      const int even_id = physical_block(p, req, c.block_begin + k);
      if (k + 1 < n) {
        const KvBlockSlot odd(block_count + k + 1);
        const int odd_id = physical_block(p, req, c.block_begin + k + 1);
        load_kv_tiles<T>(map, smem, even, even_id, head_k, 0, 3, hint);
        load_kv_tiles<T>(map, smem, odd, odd_id, head_k, 4, 7, hint);
        load_kv_tiles<T>(map, smem, even, even_id, head_k, 4, 8, hint);
        load_kv_tiles<T>(map, smem, odd, odd_id, head_k, 0, 3, hint);
        load_kv_tiles<T>(map, smem, odd, odd_id, head_k, 8, 8, hint);
      } else {
        load_kv_tiles<T>(map, smem, even, even_id, head_k, 0, 8, hint);
      }
    }
    block_count += n;
  }
}

template <class T>
__device__ __forceinline__ void produce_q(const DenseDecodeParams& p, typename T::SharedStorage& smem,
                                          const DecodingSchedMeta& meta, int m_tile, int head_k, int loader) {
  uint32_t phase = 0;
  for (int req = meta.begin_req; req <= meta.end_req; ++req, phase ^= 1) {
    smem.q_empty.wait(phase ^ 1);
    load_q_tile<T>(p, smem, req, m_tile, head_k, loader);
    smem.q_full.arrive();
  }
}

}  // namespace hopperkit::mla

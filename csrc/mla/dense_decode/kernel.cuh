// Dense MLA decode over a paged BF16/FP16 KV cache, split-KV, for SM90.
//
// Grid (⌈s_q·G / 64⌉, h_k, num_sm_parts): a CTA takes one 64-row query tile of one KV head over the
// block range of its partition (mla/sched_meta.h), request by request.
//
// | warpgroup | threads | registers | duty                                                        |
// |-----------|---------|-----------|-------------------------------------------------------------|
// | left      | 128     | 232       | scores of even blocks, output columns [0, 256), lse         |
// | right     | 128     | 232       | scores of odd blocks, output columns [256, 512)             |
// | producer  | 128     | 40        | warp 0: one lane issues the KV TMA loads; warps 1-3: Q tile |
//
// Shared memory: the Q tile and two KV block buffers, each as nine 64×64 tiles with the 128-byte
// swizzle and one full/empty barrier pair per KV tile, so Q·Kᵀ starts on the first tile while the
// rest are in flight and tiles are refilled as soon as their last reader is done (seesaw.cuh).
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "common/device.cuh"
#include "mla/dense_decode/epilogue.cuh"
#include "mla/dense_decode/producer.cuh"
#include "mla/dense_decode/seesaw.cuh"

namespace hopperkit::mla {

template <class T>
__device__ __forceinline__ void math_warpgroup(const DenseDecodeParams& p, typename T::SharedStorage& smem,
                                               const DecodingSchedMeta& meta, int warpgroup, int m_tile, int head_k) {
  const int thread_in_wg = threadIdx.x % 128;
  const int lane = threadIdx.x % 32;
  const ThreadRows rows(thread_in_wg);
  SeesawState st;
  int block_count = 0;
  uint32_t q_phase = 0;
  for (int req = meta.begin_req; req <= meta.end_req; ++req, q_phase ^= 1) {
    const RequestChunk c = request_chunk(p, meta, req);
    const int n = c.num_blocks();
    const KeyLimits keys(p, c.seqlen, m_tile, rows);
    SeesawStep<T> step{smem, rows, keys, p.scale_log2, thread_in_wg, lane};
    st.reset();
    smem.q_full.wait(q_phase);
    // The last step whose scores this warpgroup computes frees Q for the next request's tile.
    const int last_even = (n - 1) & ~1;
    const int last_pair = n >= 2 ? (n - 2) & ~1 : -1;
    if ((warpgroup == 0 ? n == 0 : last_pair < 0) && lane == 0) smem.q_empty.arrive();
    for (int k = 0; k < n; k += 2) {
      const bool pair = k + 1 < n;
      const KvBlockSlot even(block_count + k), odd(block_count + k + 1);
      if (warpgroup == 0) {
        step.left(st, even, odd, c.block_begin + k, pair, k == last_even);
      } else {
        step.right(st, even, odd, c.block_begin + k, pair, k == last_pair);
      }
    }
    block_count += n;
    if (req == meta.end_req) pdl_allow_dependents();
    store_request<T>(p, smem, st, rows, c, warpgroup, m_tile, head_k, q_phase);
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    mla_dense_decode_kernel(const __grid_constant__ DenseDecodeParams p, const __grid_constant__ CUtensorMap kv_map) {
  DecodingSchedMeta meta = p.sched[blockIdx.z];
  // Partitions the scheduler left without work. The metadata is a separate input that a caller may
  // pair with the wrong batch: a request range outside [0, batch) is clipped rather than read.
  if (meta.begin_req < 0 || meta.begin_req >= p.batch || meta.end_req < meta.begin_req) return;
  meta.end_req = min(meta.end_req, p.batch - 1);

  extern __shared__ uint8_t smem_raw[];
  // The 128B swizzle is a function of absolute shared-memory address bits: align the tiles to 1 KiB.
  const uint32_t misalignment = cute::cast_smem_ptr_to_uint(smem_raw) & 1023u;
  auto& smem = *reinterpret_cast<typename T::SharedStorage*>(smem_raw + ((1024u - misalignment) & 1023u));
  // Broadcast from lane 0 so the compiler sees the role as warp-uniform: wgmma inside a branch it
  // considers divergent is serialized (ptxas C7520), which halves the kernel's throughput.
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int m_tile = blockIdx.x;
  const int head_k = blockIdx.y;

  if (threadIdx.x == T::kMathThreads) {
    tma_prefetch_descriptor(&kv_map);
    for (int b = 0; b < 2; ++b) {
      for (int t = 0; t < T::kKTiles; ++t) {
        smem.kv_full[b][t].init(1);
        smem.kv_empty[b][t].init(4);  // the 4 warps of the warpgroup that reads the tile last
      }
    }
    smem.q_full.init(T::kQLoaderThreads);
    smem.q_empty.init(T::kMathThreads / 32);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == T::kMathWarpgroups) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegisters>();
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32) % 4, 0);
    if (warp == 0) {
      if (cute::elect_one_sync()) produce_kv<T>(p, &kv_map, smem, meta, head_k);
    } else {
      produce_q<T>(p, smem, meta, m_tile, head_k, threadIdx.x % 128 - 32);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kMathRegisters>();
    math_warpgroup<T>(p, smem, meta, warpgroup, m_tile, head_k);
  }
}

}  // namespace hopperkit::mla

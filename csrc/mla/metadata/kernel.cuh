// The split-KV scheduler: one warp partitions the batch into num_sm_parts chunks of equal cost.
//
// Cost of a request = its KV blocks + kSchedFixedOverhead. The lanes compute block counts in
// parallel and reduce the total; lane 0 then walks the partitions greedily, because each
// partition's start depends on where the previous one stopped. The walk is O(batch + parts) shared
// memory steps, a few microseconds for a decode batch, and it reads lengths from device memory so
// that a captured CUDA graph reschedules on every replay.
//
// The walk must equal hopperkit.reference.scheduler.get_mla_metadata exactly; the tests compare
// them element for element.
#pragma once

#include "common/device.cuh"
#include "mla/metadata/metadata.h"

namespace hopperkit::mla {

__global__ void __launch_bounds__(kWarpSize, 1) mla_metadata_kernel(const __grid_constant__ MetadataParams p) {
  extern __shared__ int32_t smem[];
  int32_t* s_num_blocks = smem;             // [batch]
  int32_t* s_length = smem + p.batch_size;  // [batch] after the empty-as-one-block rule
  const int lane = threadIdx.x;

  // 64-bit: batch × blocks can pass 2^31 for long contexts.
  int64_t total = 0;
  for (int i = lane; i < p.batch_size; i += kWarpSize) {
    int32_t len = p.lengths[i];
    len = len < 0 ? 0 : len;  // validated on the host; clamped so a bad value cannot index out of range
    if (p.empty_as_one_block && len == 0) len = 1;
    // A zero-length request still costs one block of scheduling (its CTA writes out 0 / lse +inf).
    const int32_t num_blocks = (len > 0 ? (len - 1) / kSchedBlockSize : 0) + 1;
    s_num_blocks[i] = num_blocks;
    s_length[i] = len;
    total += num_blocks + kSchedFixedOverhead;
  }
  total = warp_reduce_sum(total);
  __syncwarp();
  if (lane != 0) return;

  const int64_t payload = (total + p.num_sm_parts - 1) / p.num_sm_parts + kSchedFixedOverhead;
  int32_t req = 0, blk = 0, nsplit = 0, cum = 0;
  p.num_splits[0] = 0;
  for (int part = 0; part < p.num_sm_parts; ++part) {
    DecodingSchedMeta meta;
    meta.begin_req = req;
    meta.begin_block = blk;
    meta.begin_split = nsplit;
    bool first_split = blk != 0;
    int64_t remaining = payload;
    while (req < p.batch_size) {
      const int64_t left = s_num_blocks[req] - blk;
      if (remaining >= left + kSchedFixedOverhead) {
        cum += nsplit + 1;
        p.num_splits[req + 1] = cum;
        remaining -= left + kSchedFixedOverhead;
        ++req;
        blk = 0;
        nsplit = 0;
      } else {
        if (remaining - kSchedFixedOverhead > 0) {
          blk += static_cast<int32_t>(remaining - kSchedFixedOverhead);
          ++nsplit;
        }
        break;
      }
    }
    if (blk > 0) {
      meta.end_req = req;
      meta.end_block = blk;
    } else {
      meta.end_req = req - 1;
      meta.end_block = s_length[req - 1] == 0 ? 0 : s_num_blocks[req - 1];
    }
    bool last_split = meta.end_block != s_num_blocks[meta.end_req] && s_length[meta.end_req] != 0;
    if (meta.begin_req == meta.end_req) first_split = last_split = first_split || last_split;
    meta.is_first_req_split = first_split;
    meta.is_last_req_split = last_split;
    meta.pad = 0;
    p.tile_scheduler_metadata[part] = meta;
  }
}

}  // namespace hopperkit::mla

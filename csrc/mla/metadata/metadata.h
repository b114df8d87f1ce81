// Host interface of the split-KV scheduler kernel.
#pragma once

#include <cuda_runtime.h>

#include "mla/sched_meta.h"

namespace hopperkit::mla {

struct MetadataParams {
  const int32_t* lengths;  // [batch] KV tokens per request (dense: cache_seqlens, sparse: top-k length)
  int32_t batch_size;
  int32_t num_sm_parts;
  bool empty_as_one_block;  // sparse: a zero length still reads one (all-invalid) block
  DecodingSchedMeta* tile_scheduler_metadata;  // [num_sm_parts]
  int32_t* num_splits;                          // [batch + 1]
};

// Shared memory holds two ints per request; this bound keeps it inside the 227 KiB an SM90 CTA gets.
constexpr int kMetadataMaxBatch = 16384;

size_t metadata_smem_bytes(int batch_size);
void run_mla_metadata(const MetadataParams& params, cudaStream_t stream);

}  // namespace hopperkit::mla

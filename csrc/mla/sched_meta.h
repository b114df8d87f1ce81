// The split-KV schedule shared by the metadata kernel, the decode kernels and the combine.
// python/hopperkit/reference/scheduler.py is the executable specification.
#pragma once

#include <cstdint>

namespace hopperkit::mla {

// KV tokens per scheduling block: the paged-cache page of the dense kernel, the top-k block of the
// sparse kernel.
constexpr int kSchedBlockSize = 64;
// Cost of starting a request (Q load, epilogue) in units of KV blocks; balances partitions that
// hold many short requests against partitions that hold one long request.
constexpr int kSchedFixedOverhead = 5;

// One partition of the batch; row p of tile_scheduler_metadata int32 [num_sm_parts, 8].
struct DecodingSchedMeta {
  int32_t begin_req;           // first request of the partition
  int32_t end_req;             // last request (inclusive); < begin_req when the partition is empty
  int32_t begin_block;         // first KV block of begin_req
  int32_t end_block;           // one past the last KV block of end_req
  int32_t begin_split;         // accumulator-row offset of begin_req's chunk within its splits
  int32_t is_first_req_split;  // begin_req is shared with other partitions: write partials
  int32_t is_last_req_split;   // end_req is shared with other partitions: write partials
  int32_t pad;
};
static_assert(sizeof(DecodingSchedMeta) == 8 * sizeof(int32_t), "metadata rows are int32[8]");

}  // namespace hopperkit::mla

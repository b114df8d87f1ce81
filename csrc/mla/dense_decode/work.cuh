// What one CTA does: its partition's request chunks, walked identically by every role.
#pragma once

#include "mla/dense_decode/params.h"

namespace hopperkit::mla {

// The blocks [block_begin, block_end) of request `req` that this CTA's partition covers.
struct RequestChunk {
  int req;
  int seqlen;
  int block_begin;
  int block_end;
  bool split;      // other partitions hold other blocks of the request: write partials
  int accum_row;   // the partials' row in o_accum / lse_accum (when split)

  __device__ __forceinline__ int num_blocks() const { return block_end > block_begin ? block_end - block_begin : 0; }
};

__device__ __forceinline__ RequestChunk request_chunk(const DenseDecodeParams& p, const DecodingSchedMeta& meta,
                                                      int req) {
  RequestChunk c;
  c.req = req;
  c.seqlen = max(p.seqlens[req], 0);
  const int request_blocks = (c.seqlen + 63) / 64;
  c.block_begin = req == meta.begin_req ? meta.begin_block : 0;
  c.block_end = req == meta.end_req ? meta.end_block : request_blocks;
  c.split = (req == meta.begin_req && meta.is_first_req_split) || (req == meta.end_req && meta.is_last_req_split);
  c.accum_row = c.split ? p.num_splits[req] + (req == meta.begin_req ? meta.begin_split : 0) : 0;
  return c;
}

// KV blocks are consumed in pairs: the even block of a pair by the left warpgroup's scores, the odd
// one by the right's. A request with an odd block count ends with a single-block step. The two KV
// buffers alternate over the CTA's whole block sequence (not per request), so producer and
// consumers agree on buffer and phase from a running block count alone.
struct KvBlockSlot {
  int buf;
  uint32_t phase;
  __device__ __forceinline__ explicit KvBlockSlot(int global_block) : buf(global_block & 1), phase((global_block >> 1) & 1) {}
};

}  // namespace hopperkit::mla

// The seesaw schedule of the two math warpgroups (FlashMLA's 2025-04 design, rewritten here).
//
// A 64×512 FP32 output tile takes half the register file, so only one fits per SM and there is no
// second tile to ping-pong with. Instead the left warpgroup owns output columns [0, 256) and the
// right one [256, 512); both keep ONE shared running max per row. Each step takes two KV blocks:
//
//   left                                          right
//   S0 = Q·K0ᵀ                                     S1 = Q·K1ᵀ
//   m0 = max(m, rowmax S0), a0 = exp2(m - m0)
//   publish m0, a0  ─────── kLeftMaxReady ──────▶  m1 = max(m0, rowmax S1), a1 = exp2(m0 - m1)
//   P0 = exp2(S0 - m0) → smem ── kLeftPReady ───▶  P1 = exp2(S1 - m1) → smem, publish m1, a1
//   O_L = a0·O_L + P0·V0_L        ◀── kRightPReady ──
//   O_L = a1·O_L + P1·V1_L                         O_R = a0·a1·O_R + P1·V1_R + (a1·P0)·V0_R
//
// After the step both halves are expressed against m1, exactly as online softmax over K0 then K1
// would leave them, while one warpgroup's exponentials overlap the other's tensor-core work. The
// right warpgroup rescales P0 itself (ldmatrix, FP32 multiply), so no step waits on a round trip.
// Row sums: each warpgroup accumulates the sums of the P it exponentiated, rescaled like its output.
//
// Named-barrier generations: the right warpgroup syncs kLeftPReady before it arrives on
// kRightPReady, and the left waits for kRightPReady before its next step's arrivals, so neither
// barrier can receive the left warpgroup's arrivals of two steps at once.
#pragma once

#include "mla/dense_decode/softmax.cuh"
#include "mla/dense_decode/work.cuh"

namespace hopperkit::mla {

// Per-thread state of a math warpgroup for the current request.
struct SeesawState {
  float o[kOutAccs];  // this warpgroup's 64×256 half of O
  float m[2];         // running max of the thread's rows (log2 domain), shared by both warpgroups
  float sum[2];       // this thread's part of the row sums of the P this warpgroup exponentiated

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int i = 0; i < kOutAccs; ++i) o[i] = 0.0f;
    m[0] = m[1] = -INFINITY;
    sum[0] = sum[1] = 0.0f;
  }
};

// Which keys the thread's two rows may see, and whether a block needs masking or zeroing.
struct KeyLimits {
  int limit[2];     // per row: keys >= limit are invisible
  int min_limit;    // over all rows of the tile; blocks entirely below it need no mask
  int seqlen;

  __device__ __forceinline__ KeyLimits(const DenseDecodeParams& p, int seqlen_, int m_tile, const ThreadRows& rows)
      : seqlen(seqlen_) {
    const bool causal = p.causal && p.s_q > 1;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Padding rows past s_q·G take the last token's limit: never past the sequence end.
      const int s = min((m_tile * 64 + rows.row(h)) / p.heads_per_kv, p.s_q - 1);
      limit[h] = causal ? seqlen - (p.s_q - 1 - s) : seqlen;
    }
    min_limit = causal ? seqlen - (p.s_q - 1) : seqlen;
  }
  __device__ __forceinline__ bool needs_mask(int block) const { return (block + 1) * 64 > min_limit; }
  __device__ __forceinline__ bool has_rows_past_end(int block) const { return (block + 1) * 64 > seqlen; }
};

template <class T>
struct SeesawStep {
  typename T::SharedStorage& smem;
  const ThreadRows& rows;
  const KeyLimits& keys;
  float scale_log2;
  int thread_in_wg;
  int lane;

  // Scores of one block, masked where needed; the block's V rows past the end zeroed.
  template <bool kOddOrder>
  __device__ __forceinline__ void scores(KvBlockSlot slot, int block, float (&s)[kScoreAccs], DecodeBarrier zeroed) {
    block_scores<T, kOddOrder>(smem, slot.buf, slot.phase, s);
    if (keys.needs_mask(block)) mask_scores(s, rows, block * 64, keys.limit);
    if (keys.has_rows_past_end(block)) {
      zero_rows_past_end<T>(smem, slot.buf, keys.seqlen - block * 64, thread_in_wg);
      named_barrier_sync(zeroed, 128);
    }
  }

  __device__ __forceinline__ void publish_rows(float* dst, const float (&v)[2]) {
    if (rows.quad_lane == 0) {
      dst[rows.row(0)] = v[0];
      dst[rows.row(1)] = v[1];
    }
  }
  __device__ __forceinline__ void read_rows(const float* src, float (&v)[2]) {
    v[0] = src[rows.row(0)];
    v[1] = src[rows.row(1)];
  }

  // Left warpgroup: the even block of the step and, when `pair`, the odd block's P·V_L.
  __device__ __forceinline__ void left(SeesawState& st, KvBlockSlot even, KvBlockSlot odd, int block, bool pair,
                                       bool last_scores_of_request) {
    float s[kScoreAccs];
    scores<false>(even, block, s, DecodeBarrier::kLeftTailZeroed);
    if (last_scores_of_request && lane == 0) smem.q_empty.arrive();

    float mx[2], m0[2], a0[2];
    row_max(s, scale_log2, mx);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m0[h] = fmaxf(st.m[h], mx[h]);
      a0[h] = fast_exp2(st.m[h] - finite_or_zero(m0[h]));
      st.sum[h] *= a0[h];
    }
    publish_rows(smem.left_max, m0);
    publish_rows(smem.left_scale, a0);
    named_barrier_arrive(DecodeBarrier::kLeftMaxReady, T::kMathThreads);

    exponentiate(s, scale_log2, m0, st.sum);
    uint32_t p[kPRegs];
    pack_p<typename T::Elem>(s, 1.0f, 1.0f, p);
    store_p(smem.kv[even.buf][T::kPTile], rows, p);
    named_barrier_arrive(DecodeBarrier::kLeftPReady, T::kMathThreads);
    scale_rows(st.o, a0);
    pv_from_registers<T>(p, smem.kv[even.buf][0], st.o);

    if (pair) {
      named_barrier_sync(DecodeBarrier::kRightPReady, T::kMathThreads);
      float a1[2];
      read_rows(smem.right_scale, a1);
      read_rows(smem.right_max, st.m);
      cute::warpgroup_wait<0>();
      fence_accumulators(st.o);
      fence_operands(p);
      release_tiles<T>(smem, even.buf, 0, 3, lane);
      scale_rows(st.o, a1);
      st.sum[0] *= a1[0];
      st.sum[1] *= a1[1];
#pragma unroll
      for (int t = 0; t < 4; ++t) smem.kv_full[odd.buf][t].wait(odd.phase);
      pv_from_smem<T>(smem.kv[odd.buf][T::kPTile], smem.kv[odd.buf][0], st.o);
      cute::warpgroup_wait<0>();
      fence_accumulators(st.o);
      release_tiles<T>(smem, odd.buf, 0, 3, lane);
      release_tiles<T>(smem, odd.buf, T::kPTile, T::kPTile, lane);
    } else {
      st.m[0] = m0[0];
      st.m[1] = m0[1];
      cute::warpgroup_wait<0>();
      fence_accumulators(st.o);
      fence_operands(p);
      release_tiles<T>(smem, even.buf, 0, 3, lane);
    }
  }

  // Right warpgroup: when `pair`, the odd block's scores and P·V_R; always the even block's P·V_R.
  __device__ __forceinline__ void right(SeesawState& st, KvBlockSlot even, KvBlockSlot odd, int block, bool pair,
                                        bool last_scores_of_request) {
    float a1[2] = {1.0f, 1.0f};
    uint32_t p[kPRegs];
    if (pair) {
      float s[kScoreAccs];
      scores<true>(odd, block + 1, s, DecodeBarrier::kRightTailZeroed);
      if (last_scores_of_request && lane == 0) smem.q_empty.arrive();
      float mx[2];
      row_max(s, scale_log2, mx);

      named_barrier_sync(DecodeBarrier::kLeftMaxReady, T::kMathThreads);
      float m0[2], a0[2], m1[2], a01[2];
      read_rows(smem.left_max, m0);
      read_rows(smem.left_scale, a0);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        m1[h] = fmaxf(m0[h], mx[h]);
        a1[h] = fast_exp2(m0[h] - finite_or_zero(m1[h]));
        a01[h] = a0[h] * a1[h];
        st.sum[h] *= a01[h];
      }
      exponentiate(s, scale_log2, m1, st.sum);
      pack_p<typename T::Elem>(s, 1.0f, 1.0f, p);
      store_p(smem.kv[odd.buf][T::kPTile], rows, p);
      publish_rows(smem.right_max, m1);
      publish_rows(smem.right_scale, a1);
      fence_shared_for_async_proxy();  // P1 is read by the left warpgroup's wgmma
      named_barrier_sync(DecodeBarrier::kLeftPReady, T::kMathThreads);
      named_barrier_arrive(DecodeBarrier::kRightPReady, T::kMathThreads);

      scale_rows(st.o, a01);
      pv_from_registers<T>(p, smem.kv[odd.buf][4], st.o);
      st.m[0] = m1[0];
      st.m[1] = m1[1];
    } else {
      named_barrier_sync(DecodeBarrier::kLeftMaxReady, T::kMathThreads);
      float a0[2];
      read_rows(smem.left_scale, a0);
      read_rows(smem.left_max, st.m);
      st.sum[0] *= a0[0];
      st.sum[1] *= a0[1];
      scale_rows(st.o, a0);
      named_barrier_sync(DecodeBarrier::kLeftPReady, T::kMathThreads);
    }

    // O_R += (a1·P0)·V0_R
    uint32_t p0[kPRegs];
    load_p<typename T::Elem>(smem.kv[even.buf][T::kPTile], thread_in_wg, a1, p0);
#pragma unroll
    for (int t = 4; t < 8; ++t) smem.kv_full[even.buf][t].wait(even.phase);
    pv_from_registers<T>(p0, smem.kv[even.buf][4], st.o);
    if (pair) {
      cute::warpgroup_wait<1>();
      fence_operands(p);
      release_tiles<T>(smem, odd.buf, 4, 7, lane);
    }
    cute::warpgroup_wait<0>();
    fence_accumulators(st.o);
    fence_operands(p0);
    release_tiles<T>(smem, even.buf, 4, T::kPTile, lane);
  }
};

}  // namespace hopperkit::mla

// Device side of TMA: bulk tensor loads into shared memory that complete on an mbarrier, and bulk
// tensor stores from shared memory tracked by per-thread bulk async-groups.
#pragma once

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>

namespace hopperkit {

enum class CacheHint : uint64_t {
  kEvictNormal = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL),
  kEvictFirst = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST),
  kEvictLast = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_LAST),
};

// Loads the box at (inner, outer) of a 2-D tensor map into smem; the transfer's bytes count toward
// the transaction count of `bar` (the caller has set it with arrive_and_expect_tx).
__device__ __forceinline__ void tma_load_2d(const CUtensorMap* map, uint64_t* bar, void* smem, int32_t inner,
                                            int32_t outer, CacheHint hint = CacheHint::kEvictNormal) {
  cute::SM90_TMA_LOAD_2D::copy(map, bar, static_cast<uint64_t>(hint), smem, inner, outer);
}

// The same load, written into the same shared-memory offset of every CTA in `cta_mask` (bit i = CTA
// rank i of the cluster); each destination CTA's barrier at the same offset receives the bytes.
__device__ __forceinline__ void tma_load_2d_multicast(const CUtensorMap* map, uint64_t* bar, void* smem, int32_t inner,
                                                      int32_t outer, uint16_t cta_mask,
                                                      CacheHint hint = CacheHint::kEvictNormal) {
  cute::SM90_TMA_LOAD_MULTICAST_2D::copy(map, bar, cta_mask, static_cast<uint64_t>(hint), smem, inner, outer);
}

// Loads the box at coordinates (c0, c1, c2) of a 3-D tensor map; c0 is the innermost dimension.
__device__ __forceinline__ void tma_load_3d(const CUtensorMap* map, uint64_t* bar, void* smem, int32_t c0, int32_t c1,
                                            int32_t c2, CacheHint hint = CacheHint::kEvictNormal) {
  cute::SM90_TMA_LOAD_3D::copy(map, bar, static_cast<uint64_t>(hint), smem, c0, c1, c2);
}

// Loads the box at coordinates (c0, c1, c2, c3) of a 4-D tensor map; c0 is the innermost dimension.
// Coordinates outside the tensor (negative included) read as zeros without faulting.
__device__ __forceinline__ void tma_load_4d(const CUtensorMap* map, uint64_t* bar, void* smem, int32_t c0, int32_t c1,
                                            int32_t c2, int32_t c3, CacheHint hint = CacheHint::kEvictNormal) {
  cute::SM90_TMA_LOAD_4D::copy(map, bar, static_cast<uint64_t>(hint), smem, c0, c1, c2, c3);
}

// Stores a shared-memory box to the 2-D tensor map at (inner, outer). Parts of the box outside the
// tensor are not written, which makes ragged M/N edges free. The smem must have been written
// before a fence_shared_for_async_proxy() by every writing thread, ordered by a barrier.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem, int32_t inner, int32_t outer) {
  cute::SM90_TMA_STORE_2D::copy(map, smem, inner, outer);
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* smem, int32_t c0, int32_t c1,
                                             int32_t c2) {
  cute::SM90_TMA_STORE_3D::copy(map, smem, c0, c1, c2);
}

// Closes this thread's current group of bulk stores (the unit the waits below count).
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until at most kPending of this thread's store groups still read their shared memory: the
// buffers of the others may be overwritten (their global writes may still be in flight).
template <int kPending>
__device__ __forceinline__ void tma_store_wait_smem_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Waits until every store group of this thread is complete.
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(map));
}

// Adds the box at (c0, c1, c2) of a 3-D tensor map from smem into global memory (global += smem,
// element-wise, performed by the TMA unit without a read-back through the SM). Same clipping and
// ordering rules as tma_store_2d.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* smem, int32_t c0, int32_t c1,
                                                  int32_t c2) {
  cute::SM90_TMA_REDUCE_ADD_3D::copy(map, smem, c0, c1, c2);
}

// A tensor map read from global memory (not a kernel parameter) that an earlier kernel wrote (see
// tensormap_publish) or the host copied in: this thread orders those writes before its TMA use of
// the map (CUDA programming guide, "tensor maps in global memory"; .sys covers both writers).
__device__ __forceinline__ void tensormap_acquire(const CUtensorMap* map) {
  asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" ::"l"(map) : "memory");
}

// Rewriting a tensor map on the device (PTX tensormap.replace, sm_90a): edit a copy in shared memory
// (128-byte aligned), then publish it to global memory with tensormap_publish. Only the fields named
// change; box, swizzle, element type and the other dimensions stay those of the copied map.
__device__ __forceinline__ void tensormap_set_address(CUtensorMap* smem_map, const void* address) {
  asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(smem_map))),
               "l"(reinterpret_cast<uint64_t>(address))
               : "memory");
}

// Extent of the innermost dimension (elements).
__device__ __forceinline__ void tensormap_set_inner_dim(CUtensorMap* smem_map, uint32_t extent) {
  asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %1;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(smem_map))),
               "r"(extent)
               : "memory");
}

// Byte stride between consecutive rows (dimension 1), a multiple of 16.
__device__ __forceinline__ void tensormap_set_row_stride(CUtensorMap* smem_map, uint64_t stride_bytes) {
  asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %1;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(smem_map))),
               "l"(stride_bytes)
               : "memory");
}

// Warp-collective (every lane, converged): copies the edited map from shared to global memory with
// release semantics toward the tensormap proxy at GPU scope, so a later kernel that acquires it
// (tensormap_acquire) uses the new fields. The edits must be ordered before it (__syncwarp).
__device__ __forceinline__ void tensormap_publish(CUtensorMap* global_map, const CUtensorMap* smem_map) {
  asm volatile(
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;" ::"l"(
          global_map),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_map)))
      : "memory");
}

}  // namespace hopperkit

// Host side of TMA: building CUtensorMap descriptors.
//
// The driver's cuTensorMapEncodeTiled is fetched through the runtime at first use instead of being
// linked, so the extension does not depend on libcuda.so at load time and imports on machines
// without a GPU driver (CI).
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "common/host_checks.h"

namespace hopperkit {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    HK_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    HK_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
             "the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12 or newer is required)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A 2-D row-major global tensor [outer, inner] read in boxes of [box_outer, box_inner] elements.
// Out-of-bounds parts of a box read as zero, which is what makes ragged M/N/K edges free.
inline CUtensorMap make_tma_2d(const void* base, CUtensorMapDataType dtype, int elem_bytes, uint64_t inner,
                               uint64_t outer, uint64_t row_stride_elems, uint32_t box_inner, uint32_t box_outer,
                               CUtensorMapSwizzle swizzle) {
  HK_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "TMA needs 16-byte aligned tensor base addresses");
  HK_CHECK((row_stride_elems * elem_bytes) % 16 == 0, "TMA needs row strides that are multiples of 16 bytes, got ",
           row_stride_elems * elem_bytes, " bytes");
  CUtensorMap map;
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {row_stride_elems * elem_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult rc = tensor_map_encoder()(&map, dtype, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                                           CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HK_CHECK(rc == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with error ", static_cast<int>(rc), " for a [", outer,
           ", ", inner, "] tensor with box [", box_outer, ", ", box_inner, "]");
  return map;
}

// An N-D strided global tensor (dims[0] innermost and contiguous) read in boxes of `box` elements.
// strides_bytes[i] is the byte stride of dimension i + 1; every stride must be a multiple of 16.
template <int kRank>
CUtensorMap make_tma_nd(const void* base, CUtensorMapDataType dtype, const uint64_t (&dims)[kRank],
                        const uint64_t (&strides_bytes)[kRank - 1], const uint32_t (&box)[kRank],
                        CUtensorMapSwizzle swizzle) {
  static_assert(kRank >= 2 && kRank <= 5, "TMA tensors have 2 to 5 dimensions here");
  HK_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "TMA needs 16-byte aligned tensor base addresses");
  cuuint64_t d[kRank];
  cuuint64_t s[kRank - 1];
  cuuint32_t b[kRank];
  cuuint32_t e[kRank];
  for (int i = 0; i < kRank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    e[i] = 1;
    if (i < kRank - 1) {
      HK_CHECK(strides_bytes[i] % 16 == 0, "TMA needs strides that are multiples of 16 bytes, got ", strides_bytes[i],
               " bytes for dimension ", i + 1);
      s[i] = strides_bytes[i];
    }
  }
  CUtensorMap map;
  const CUresult rc = tensor_map_encoder()(&map, dtype, kRank, const_cast<void*>(base), d, s, b, e,
                                           CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HK_CHECK(rc == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with error ", static_cast<int>(rc), " for a rank-",
           kRank, " tensor");
  return map;
}

}  // namespace hopperkit

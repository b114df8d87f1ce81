// Argument checks shared by the op implementations, and the host-side layout arithmetic they imply.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#include "common/host_checks.h"

namespace hopperkit::ops {

inline void check_cuda_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  HK_CHECK_VALUE(t.is_cuda(), name, " must be a CUDA tensor, got one on ", t.device());
  HK_CHECK_TYPE(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* name, const char* ref_name) {
  HK_CHECK_VALUE(t.device() == ref.device(), name, " is on ", t.device(), " but ", ref_name, " is on ", ref.device());
}

// The kernels are compiled for sm_90a only; on any other device the launch would fail with "no
// kernel image". Say so before launching.
inline void check_sm90(const at::Tensor& t) {
  int major = 0, minor = 0;
  HK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, t.get_device()));
  HK_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, t.get_device()));
  HK_CHECK(major == 9 && minor == 0, "this build has kernels for sm_90a (H100/H200/H800) only; ", t.device(),
           " is sm_", major, minor, ". Use the hopperkit Python API, which runs the reference there.");
}

inline void check_num_sms(int64_t num_sms) {
  HK_CHECK_VALUE(num_sms >= 1 && num_sms <= 1024, "num_sms must be in [1, 1024], got ", num_sms);
}

// Row stride (elements) of a row-major [..., rows, cols] tensor as a kernel or TMA map is given it. A
// single row is never stepped over and torch reports any stride for it; the row width stands in.
inline int64_t row_stride(const at::Tensor& t) { return t.size(-2) > 1 ? t.stride(-2) : t.size(-1); }

// FP8 [rows, K], K-major with 16-byte aligned rows. The stride of a dimension with one entry is never
// stepped over, so it is not checked (the Python checks agree): a [1, K] view of a wider tensor is
// accepted whatever its row stride. Maps must therefore take the row stride from fp8_row_stride,
// never from stride(0), which would hand TMA a stride that is not a multiple of 16 bytes.
inline void check_fp8_k_major(const at::Tensor& t, const char* name) {
  check_cuda_tensor(t, name, at::kFloat8_e4m3fn);
  HK_CHECK_VALUE(t.dim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1) && (t.size(0) <= 1 || t.stride(0) % 16 == 0) &&
                     (t.numel() == 0 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0),
                 name, " must be a K-major [rows, K] FP8 tensor with 16-byte aligned rows, got shape ", t.sizes(),
                 " strides ", t.strides());
}

// The row stride TMA steps over for a tensor accepted by check_fp8_k_major: stride(0), or for a single
// row K rounded up to 16 bytes (any multiple of 16 would do; the map never steps).
inline int64_t fp8_row_stride(const at::Tensor& t) { return t.size(0) <= 1 ? (t.size(1) + 15) / 16 * 16 : t.stride(0); }

}  // namespace hopperkit::ops

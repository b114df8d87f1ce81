// Argument checks shared by the op implementations.
#pragma once

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

}  // namespace hopperkit::ops

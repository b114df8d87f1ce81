// Host-side error handling shared by every op. All messages start with "hopperkit:" and say what was
// expected; TORCH_CHECK turns them into Python RuntimeError/ValueError-compatible c10::Error.
#pragma once

#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#define HK_CHECK(cond, ...) TORCH_CHECK((cond), "hopperkit: ", __VA_ARGS__)
#define HK_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE((cond), "hopperkit: ", __VA_ARGS__)
#define HK_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE((cond), "hopperkit: ", __VA_ARGS__)

// Every CUDA runtime call and every launch is checked; a failed launch names the kernel. A failed
// launch also leaves its error as the runtime's last error, which the next caller that checks it
// (any PyTorch kernel launch) would report as its own: it is taken off before raising.
#define HK_CUDA_CHECK(expr)                                                                      \
  do {                                                                                           \
    cudaError_t hk_err_ = (expr);                                                                \
    if (hk_err_ != cudaSuccess) (void)cudaGetLastError();                                        \
    TORCH_CHECK(hk_err_ == cudaSuccess, "hopperkit: CUDA error ", cudaGetErrorName(hk_err_),     \
                " (", cudaGetErrorString(hk_err_), ") at " __FILE__ ":", __LINE__, ": " #expr); \
  } while (0)

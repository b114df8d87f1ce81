// What this binary was built with, as compiled into it (reported by `python -m hopperkit`).
#include <string>

#include <cutlass/version.h>

#include "ops/ops.h"

#define HK_STR_(x) #x
#define HK_STR(x) HK_STR_(x)

namespace hopperkit::ops {

std::string build_info() {
  std::string info;
  info += "cuda=" HK_STR(__CUDACC_VER_MAJOR__) "." HK_STR(__CUDACC_VER_MINOR__) "." HK_STR(__CUDACC_VER_BUILD__);
  info += ";cutlass=" + std::to_string(CUTLASS_MAJOR) + "." + std::to_string(CUTLASS_MINOR) + "." +
          std::to_string(CUTLASS_PATCH);
#ifdef __CUDA_ARCH_LIST__
  info += ";arch_list=" HK_STR(__CUDA_ARCH_LIST__);
#endif
#ifdef HOPPERKIT_GENCODE_SM90A  // set by setup.py next to -gencode=arch=compute_90a,code=sm_90a
  info += ";gencode=sm_90a";
#endif
  return info;
}

}  // namespace hopperkit::ops

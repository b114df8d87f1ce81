// The hopperkit operator library. This file opens the library and the Python module; each domain
// (mla.cpp, ...) adds its schemas with TORCH_LIBRARY_FRAGMENT next to its implementations and checks.
// Output tensors that ops write in place carry alias annotations (a!) so that torch.compile and
// functionalization know what they mutate.
#include <Python.h>
#include <torch/library.h>

#include "gemm/instantiations.h"
#include "ops/checks.h"
#include "ops/ops.h"

namespace {

bool share_memory_op(const at::Tensor& x, const at::Tensor& y) { return hopperkit::ops::share_memory(x, y); }

std::vector<std::string> gemm_instantiations_op(const std::string& family) {
  if (family == "fp8_1d2d") return hopperkit::gemm::fp8_1d2d_instantiations();
  if (family == "fp8_1d1d") return hopperkit::gemm::fp8_1d1d_instantiations();
  if (family == "bf16") return hopperkit::gemm::bf16_instantiations();
  HK_CHECK_VALUE(false, "family must be fp8_1d2d, fp8_1d1d or bf16, got '", family, "'");
  return {};
}

}  // namespace

TORCH_LIBRARY(hopperkit, m) {
  m.def("build_info() -> str", &hopperkit::ops::build_info);
  // The GEMM ops' aliasing check (ops/checks.h share_memory), for tensors on any device: it reads
  // only addresses, sizes and strides, so the tests hold it to the Python one on the CPU.
  m.def("_share_memory(Tensor x, Tensor y) -> bool", &share_memory_op);
  // The compiled GEMM instantiations of a kernel family (gemm/instantiations.h), host-only: the
  // tests hold their lists of forced configurations to them on any machine.
  m.def("_gemm_instantiations(str family) -> str[]", &gemm_instantiations_op);
}

// `import hopperkit._C` runs the registrations above. The module itself is empty and uses only the
// limited API, so one abi3 build loads into every CPython that torch supports.
PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "hopperkit CUDA ops (see torch.ops.hopperkit)", -1,
                                   nullptr};
  return PyModule_Create(&module_def);
}

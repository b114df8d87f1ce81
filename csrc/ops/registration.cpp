// The hopperkit operator library: schemas here, CUDA implementations next to their checks in the
// other files of this folder. Output tensors that ops write in place carry alias annotations (a!)
// so that torch.compile and functionalization know what they mutate.
#include <Python.h>
#include <torch/library.h>

#include "ops/ops.h"

TORCH_LIBRARY(hopperkit, m) {
  m.def("build_info() -> str", &hopperkit::ops::build_info);
  m.def("get_mla_metadata(Tensor lengths, int num_sm_parts, bool empty_as_one_block) -> (Tensor, Tensor)");
  m.def(
      "mla_combine(Tensor o_accum, Tensor lse_accum, Tensor num_splits, Tensor(a!) out, Tensor(b!) lse, "
      "Tensor? attn_sink, bool pdl=True) -> ()");
}

TORCH_LIBRARY_IMPL(hopperkit, CUDA, m) {
  m.impl("get_mla_metadata", &hopperkit::ops::get_mla_metadata);
  m.impl("mla_combine", &hopperkit::ops::mla_combine);
}

// `import hopperkit._C` runs the registrations above. The module itself is empty and uses only the
// limited API, so one abi3 build loads into every CPython that torch supports.
PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "hopperkit CUDA ops (see torch.ops.hopperkit)", -1,
                                   nullptr};
  return PyModule_Create(&module_def);
}

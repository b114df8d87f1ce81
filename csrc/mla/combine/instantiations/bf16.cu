#include "mla/combine/launch.cuh"

template void hopperkit::mla::run_mla_combine<__nv_bfloat16>(const CombineParams<__nv_bfloat16>&, cudaStream_t);

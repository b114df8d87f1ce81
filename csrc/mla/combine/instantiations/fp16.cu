#include "mla/combine/launch.cuh"

template void hopperkit::mla::run_mla_combine<__half>(const CombineParams<__half>&, cudaStream_t);

#include "mla/dense_decode/launch.cuh"

template void hopperkit::mla::run_mla_dense_decode<__half>(const DenseDecodeParams&, const CUtensorMap&, int,
                                                           cudaStream_t);

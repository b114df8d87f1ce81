#!/usr/bin/env bash
# Run compute-sanitizer over the GPU tests that reach every kernel on small shapes: each FP8 1d2d
# configuration (A multicast included), the split-K fixups (cluster and global), the m-grouped layouts, the 1d1d and
# k-grouped kernels, every BF16 instantiation, MLA decode (BF16 and FP8 caches, split and unsplit),
# its metadata and combine kernels, and the casts. Shapes stay small because the tools run the
# kernels 10-100x slower.
#
# Seen on an H200 (CUDA 13.0), before the 128×256 FP8 tile: memcheck and synccheck report no error
# (about 90 and 45 s). On an H100 with that tile: memcheck reports no error in its three passes
# (the listed tests without graphs, MLA decode, the graph tests: 473 tests, 176 s).
# racecheck takes longer than 200 s and reports the FP8 kernels' B-scale handoff through the stage
# (one producer thread's ordinary shared-memory store, then its arrive on the full barrier; the math
# threads' read after their wait on it) as hazards, although the barrier's release arrive and
# acquire wait order the two (common/pipeline.cuh producer_arrive): read such reports against the
# mbarrier protocol before acting on them.
#
#   scripts/sanitize.sh LOGDIR [TOOL ...]      TOOL: memcheck (default), racecheck, synccheck, initcheck
#
# Reuses the extension built in the tree (python/hopperkit/_C*.so), like HOPPERKIT_SKIP_BUILD=1
# scripts/gpu_check.sh. The caching allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so that
# memcheck sees each tensor's own bounds rather than the pool block around it; the CUDA-graph tests
# run in a pass of their own with it on, since without it every allocation inside a capture is a
# cudaMalloc, which invalidates the capture. One log per tool: LOGDIR/sanitize_TOOL.txt. Exit
# status: 0 when every tool reported no error and every test passed.
set -uo pipefail

LOG=${1:?usage: scripts/sanitize.sh LOGDIR [TOOL ...]}
shift
TOOLS=("$@")
[ ${#TOOLS[@]} -eq 0 ] && TOOLS=(memcheck)
mkdir -p "$LOG"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

TESTS=(
  "tests/test_fp8_gemm_gpu.py::test_1d2d_every_config"
  "tests/test_fp8_gemm_gpu.py::test_1d2d_a_multicast"
  "tests/test_fp8_gemm_gpu.py::test_1d2d_last_m_block_loads_only_its_rows"
  "tests/test_fp8_gemm_gpu.py::test_split_k_forced"
  "tests/test_fp8_gemm_gpu.py::test_split_k_fixups_agree"
  "tests/test_fp8_gemm_gpu.py::test_1d2d_odd_shapes"
  "tests/test_fp8_gemm_gpu.py::test_empty_is_noop"
  "tests/test_grouped_gemm_gpu.py::test_contiguous_every_tile"
  "tests/test_grouped_gemm_gpu.py::test_contiguous_psum_layout_and_odd_k"
  "tests/test_grouped_gemm_gpu.py::test_masked_256_row_tiles"
  "tests/test_grouped_gemm_gpu.py::test_masked_size_one_dims_any_stride"
  "tests/test_grouped_gemm_gpu.py::test_masked_cuda_graph_replay"
  "tests/test_fp8_1d1d_gpu.py::test_dense_c_modes_and_edges"
  "tests/test_fp8_1d1d_gpu.py::test_k_grouped_empty_groups_and_edges"
  "tests/test_fp8_1d1d_gpu.py::test_k_grouped_small_m_and_repeatable"
  "tests/test_bf16_gemm_gpu.py::test_every_instantiation"
  "tests/test_bf16_gemm_gpu.py::test_edge_sizes"
  "tests/test_bf16_gemm_gpu.py::test_masked_large_m_max_few_rows"
  "tests/test_bf16_gemm_gpu.py::test_k_grouped_empty_groups_and_edges"
  "tests/test_bf16_gemm_gpu.py::test_split_k_forced"
  "tests/test_bf16_gemm_gpu.py::test_split_k_fixups_agree"
  "tests/test_bf16_gemm_gpu.py::test_swap_ab_decode"
  "tests/test_bf16_gemm_gpu.py::test_swap_ab_forced_width"
  "tests/test_bf16_gemm_gpu.py::test_narrow_tile"
  "tests/test_bf16_gemm_gpu.py::test_odd_width_tiles"
  "tests/test_bf16_gemm_gpu.py::test_last_m_block_loads_only_its_rows"
  "tests/test_bf16_gemm_gpu.py::test_odd_width_tiles_keep_subnormal_c"
  "tests/test_fp8_gemm_gpu.py::test_1d2d_mid_m_split"
  "tests/test_mla_scheduler.py"
  "tests/test_mla_decode_gpu.py::test_causal_rows_without_keys"
  "tests/test_mla_decode_gpu.py::test_cuda_graph_replay_with_new_seqlens"
  "tests/test_quant_kernels.py::test_non_finite_inputs"
  "tests/test_quant_kernels.py::test_empty_inputs"
  # CUDA graphs (the cached pass below)
  "tests/test_fp8_gemm_gpu.py::test_split_k_cuda_graph_replay"
  "tests/test_fp8_1d1d_gpu.py::test_k_grouped_graph_replays_other_sizes"
  "tests/test_bf16_gemm_gpu.py::test_masked_cuda_graph_replay"
  "tests/test_bf16_gemm_gpu.py::test_split_k_cuda_graph_replay"
  "tests/test_quant_kernels.py::test_cuda_graph_capture"
)
# MLA decode: the short and ragged sequence lengths, both cache dtypes, split and unsplit.
DECODE_K="test_decode_matches_reference and (sk20 or sk140) and (b6 or b64)"
# The FP8 configurations on the smallest of their shapes.
CONFIG_K="not every_config or M1000"

# One pytest pass under the tool, appended to the log. First argument: "uncached" (the caching
# allocator off) or "cached".
sanitized_pytest() {
  local allocator=(env -u PYTORCH_NO_CUDA_MEMORY_CACHING)
  [ "$1" = uncached ] && allocator=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1)
  shift
  "${allocator[@]}" compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 20 --target-processes all \
    python3 -m pytest -q -rf -p no:cacheprovider -m gpu "$@" >>"$out" 2>&1
}

status=0
for tool in "${TOOLS[@]}"; do
  out="$LOG/sanitize_$tool.txt"
  : >"$out"
  start=$(date +%s)
  rcs=""
  sanitized_pytest uncached "${TESTS[@]}" -k "($CONFIG_K) and not graph"; rcs+=" $?"
  sanitized_pytest uncached tests/test_mla_decode_gpu.py -k "$DECODE_K"; rcs+=" $?"
  sanitized_pytest cached "${TESTS[@]}" -k graph; rcs+=" $?"
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|^FAILED" "$out" | tr '\n' ' ')
  echo "$tool: exit$rcs in $(( $(date +%s) - start )) s: $summary"
  for rc in $rcs; do [ "$rc" -ne 0 ] && status=1; done
done
exit $status

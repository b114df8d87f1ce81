#!/usr/bin/env bash
# Build hopperkit on a Hopper machine, check the build, run the whole test suite (GPU tests included)
# and a quick benchmark; everything is logged into the folder given as the first argument.
#
#   scripts/gpu_check.sh LOGDIR [pytest args...]
#
# Works without network: CUTLASS comes from (in order) CUTLASS_HOME, an installed nvidia-cutlass
# wheel, or a wheel file carried in .whl/ (unpacked, not pip-installed: only its headers are needed).
# Environment: MAX_JOBS (default: all cores), HOPPERKIT_SANITIZE=0 skips the memcheck step,
# HOPPERKIT_BENCH=0 skips the benchmark, =full runs the full MLA and GEMM shape lists instead of the
# quick ones,
# HOPPERKIT_SKIP_BUILD=1 reuses the extension already built in the tree (python/hopperkit/_C*.so,
# e.g. built on another machine and carried), and then needs no CUTLASS.
set -uo pipefail

LOG=${1:?usage: scripts/gpu_check.sh LOGDIR [pytest args...]}
shift
mkdir -p "$LOG"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
status=0
step() { echo; echo "=== $* ==="; }

step "device"
# At most 8 files come back from a lent machine: summary.txt, build.log, ptxas.txt, sass.txt,
# pytest.txt, bench_mla.txt, bench_mla.json, bench_gemm.txt (GEMM and FP8 casts).
SUMMARY="$LOG/summary.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv 2>&1 | tee "$SUMMARY"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" | tee -a "$SUMMARY"

if [ "${HOPPERKIT_SKIP_BUILD:-0}" != "1" ]; then
  step "CUTLASS"
  if [ -z "${CUTLASS_HOME:-}" ] && ! python3 -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('cutlass_library') is None)"; then
    whl=$(ls .whl/nvidia_cutlass-*.whl 2>/dev/null | head -n 1)
    if [ -z "$whl" ]; then
      echo "no CUTLASS: set CUTLASS_HOME, install nvidia-cutlass, or carry the wheel in .whl/"; exit 2
    fi
    rm -rf /tmp/hopperkit-cutlass && mkdir -p /tmp/hopperkit-cutlass
    python3 -m zipfile -e "$whl" /tmp/hopperkit-cutlass
    export CUTLASS_HOME=/tmp/hopperkit-cutlass/cutlass_library/source
  fi
  echo "CUTLASS_HOME=${CUTLASS_HOME:-<nvidia-cutlass wheel>}"

  step "build"
  # The image's default CXX links libstdc++ statically into extensions, and a second libstdc++ in
  # the process crashes on iostream/locale use: build with the system compiler.
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared"
  export MAX_JOBS=${MAX_JOBS:-$(nproc)} HOPPERKIT_FORCE_CUDA_BUILD=1
  start=$(date +%s)
  python3 -m pip install --no-build-isolation --no-deps --no-index -v -e . >"$LOG/build.log" 2>&1
  rc=$?
  echo "build exit $rc in $(( $(date +%s) - start )) s (log: build.log)"
  grep -E "registers|spill|stack frame|warning|error" "$LOG/build.log" | grep -v "^ *$" >"$LOG/ptxas.txt"
  if [ $rc -ne 0 ]; then tail -n 60 "$LOG/build.log"; exit $rc; fi
  if grep -E "[1-9][0-9]* bytes spill|[1-9][0-9]* bytes stack frame" "$LOG/ptxas.txt"; then
    echo "ptxas reports spills or local memory (above)"; status=1
  fi
fi

# A reused build is imported from the tree (nothing was installed).
[ "${HOPPERKIT_SKIP_BUILD:-0}" = "1" ] && export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

step "build check"
so=$(ls python/hopperkit/_C*.so | head -n 1)
ldd "$so" | grep -E "stdc\+\+" | tee -a "$SUMMARY"
codecvt=$(nm -C "$so" | grep -c codecvt || true)
echo "statically linked libstdc++ symbols (codecvt): $codecvt" | tee -a "$SUMMARY"
[ "$codecvt" = "0" ] || { echo "the extension carries its own libstdc++: rebuild with the system compiler"; status=1; }
python3 -m hopperkit | tee -a "$SUMMARY"
cuobjdump -sass "$so" >"$LOG/sass.txt" 2>&1
python3 - "$LOG/sass.txt" <<'EOF' | tee -a "$SUMMARY"
import collections, re, sys
count, fn = collections.defaultdict(collections.Counter), None
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        fn = m.group(1)
    elif fn:
        for op in ("HGMMA", "QGMMA", "UTMALDG", "UTMASTG", "UBLKCP", "LDL", "STL"):
            if re.search(rf"\b{op}\b", line):
                count[fn][op] += 1
print(f"{len(count) or 'no'} kernels with tensor-core / TMA / local-memory instructions")
for fn, c in sorted(count.items()):
    print(f"  {fn[:90]}: {dict(c)}")
EOF

step "tests"
python3 -m pytest -q -rs "$@" 2>&1 | tee "$LOG/pytest.txt"
[ "${PIPESTATUS[0]}" = "0" ] || status=1

if [ "${HOPPERKIT_SANITIZE:-1}" != "0" ]; then
  step "memcheck"
  # Inputs that pass every shape check but are out of contract must not reach outside the tensors;
  # only the sanitizer sees an out-of-bounds read that happens to land in mapped memory.
  start=$(date +%s)
  compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider \
    tests/test_mla_decode_gpu.py -k "stays_in_bounds" 2>&1 | tail -n 30 | tee -a "$LOG/pytest.txt"
  [ "${PIPESTATUS[0]}" = "0" ] || status=1
  echo "memcheck in $(( $(date +%s) - start )) s"
fi

if [ "${HOPPERKIT_BENCH:-1}" != "0" ]; then
  step "quick benchmark"
  mla_shapes=--quick
  gemm_shapes="--quick --only dense --only wgrad"
  if [ "${HOPPERKIT_BENCH:-1}" = "full" ]; then mla_shapes=""; gemm_shapes=""; fi
  python3 benchmarks/bench_mla.py $mla_shapes --json "$LOG/bench_mla.json" 2>&1 | tee "$LOG/bench_mla.txt"
  [ "${PIPESTATUS[0]}" = "0" ] || status=1
  python3 benchmarks/bench_gemm.py $gemm_shapes 2>/dev/null | tee "$LOG/bench_gemm.txt"
  [ "${PIPESTATUS[0]}" = "0" ] || status=1
  python3 benchmarks/bench_quant.py --quick 2>&1 | tee -a "$LOG/bench_gemm.txt"
  [ "${PIPESTATUS[0]}" = "0" ] || status=1
fi

step "summary"
tail -n 1 "$LOG/pytest.txt"
echo "gpu_check exit status $status"
exit $status

#!/usr/bin/env bash
# One device call does everything: build the kernels, run the CUDA test suite,
# run the benchmarks; every log and result lands in $OUT.
#
#   run(command="bash benchmarks/device_run.sh [all|tests|bench|probe|maxk|maxktrain|...]", carry=[".device_data"])
# all = CUDA tests + benchmark suite; probe = kernel config/chunk sweep (kernel_probe.py);
# maxk = MaxK-GNN kernels (Figure 8) + training epoch (pyg_tc/bench/maxk.py, args in $MAXK_ARGS);
# maxktrain = MaxK accuracy / epoch time on real datasets (pyg_tc/bench/maxk_train.py, $MAXKTRAIN_ARGS).
# tcgnn = TC-GNN kernels, auto/warps rules, SGT build, Table 6, GCN/AGNN training + accuracy (pyg_tc/bench/tcgnn.py, $TCGNN_ARGS).
# sanitize = TC-GNN kernels under compute-sanitizer memcheck (benchmarks/sanitize_sgt.py).
# sass = SASS of the TC-GNN SpMM (fp32 / fp16, F = 16) and Nsight Compute's source page (executed
#        instructions and stall samples per SASS line) of one SpMM call, graph from $NCU_ARGS (default --sgt=tolokers).
# TEST_ARGS narrows the CUDA tests (default: the whole tests/ folder).
#
# .device_data/ holds a copy of ../shared/datasets (ignored by git, carried by
# the device tool because ../shared does not travel):
#   mkdir -p .device_data/datasets && cp -r ../shared/datasets/{planetoid,heterophilous,tu,misc} .device_data/datasets/
set -u -o pipefail
MODE=${1:-all}
OUT=${OUT:-$PWD/device_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYG_TC_BUILD_DIR=${PYG_TC_BUILD_DIR:-/tmp/pyg_tc_build}
[ -d .device_data ] && export PYG_TC_SHARED=$PWD/.device_data
# at most 8 files come back from the device: keep the count low
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/info.txt"
t0=$(date +%s)
python -c "import pyg_tc, json; print(json.dumps(pyg_tc.info(), indent=1))" 2>&1 | tee -a "$OUT/info.txt" || exit 1
echo "build+import: $(( $(date +%s) - t0 )) s"
rc=0
if [[ ",$MODE," == *,probe,* ]]; then
  python benchmarks/kernel_probe.py ${PROBE_ARGS:-} 2>&1 | tee "$OUT/probe.log" || rc=1
  python benchmarks/memory_probe.py 2>&1 | tee -a "$OUT/probe.log" || rc=1
fi
if [[ ",$MODE," == *,ncu,* ]]; then  # profile (Firecracker machines only)
  ncu --clock-control none -k regex:"spmm_units|csrmm|cusparse|SpMM|sgt_spmm|sgt_reduce" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section InstructionStats \
      --section LaunchStats \
      python benchmarks/ncu_probe.py ${NCU_ARGS:-} > "$OUT/ncu.txt" 2>&1 || rc=1
  tail -5 "$OUT/ncu.txt"
fi
if [[ ",$MODE," == *,sass,* ]]; then  # SASS of the TC-GNN SpMM + per-instruction counts (ncu source page)
  so=$(find "$PYG_TC_BUILD_DIR" -name '*.so' | head -1)
  cuobjdump -sass "$so" | awk '/Function : /{p = ($0 ~ /sgt_spmm_kernelI(f|6__half)Li16ELb1ELb1E/)} p' > "$OUT/sgt_spmm.sass" || rc=1
  ncu --clock-control none -k regex:"sgt_spmm" --launch-count 1 --section SourceCounters --section InstructionStats \
      --page source --print-source sass --csv python benchmarks/ncu_probe.py ${NCU_ARGS:---sgt=tolokers} \
      > "$OUT/sgt_spmm_source.csv" 2>&1 || rc=1
  tail -3 "$OUT/sgt_spmm_source.csv"
fi
if [[ ",$MODE," == *,sgtprobe,* ]]; then
  python benchmarks/sgt_probe.py ${SGTPROBE_ARGS:-} 2>&1 | tee "$OUT/sgt_probe.log" || rc=1
fi
if [[ ",$MODE," == *,sanitize,* ]]; then  # TC-GNN kernels under compute-sanitizer memcheck
  compute-sanitizer --tool memcheck --error-exitcode 9 python benchmarks/sanitize_sgt.py 2>&1 | tail -30 | tee "$OUT/sanitize.log" || rc=1
  # shared-memory hazards of the staged (cp.async) SpMM pipeline
  compute-sanitizer --tool racecheck --error-exitcode 9 python benchmarks/sanitize_sgt.py quick 2>&1 | tail -30 | tee -a "$OUT/sanitize.log" || rc=1
fi
if [[ ",$MODE," == *,tests,* || "$MODE" == all ]]; then
  python -m pytest -q -rf -m cuda --timeout=900 ${TEST_ARGS:-tests} -p no:cacheprovider 2>&1 | tee "$OUT/cuda_tests.log" || rc=1
fi
if [[ ",$MODE," == *,maxk,* ]]; then
  python -m pyg_tc.bench.maxk --out "$OUT/maxk" ${MAXK_ARGS:-} 2>&1 | tee "$OUT/maxk.log" || rc=1
fi
if [[ ",$MODE," == *,maxktrain,* ]]; then
  python benchmarks/maxk_train.py --out "$OUT/maxk_train" ${MAXKTRAIN_ARGS:-} 2>&1 | tee "$OUT/maxk_train.log" || rc=1
fi
if [[ ",$MODE," == *,tcgnn,* ]]; then
  python -m pyg_tc.bench.tcgnn --out "$OUT/tcgnn" ${TCGNN_ARGS:-} 2>&1 | tee "$OUT/tcgnn.log" || rc=1
fi
if [[ ",$MODE," == *,bench,* || "$MODE" == all ]]; then
  python -m pyg_tc bench --out "$OUT/bench" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" || rc=1
fi
exit $rc

#!/usr/bin/env bash
# One device call does everything: build the kernels, run the CUDA test suite,
# run the benchmarks; every log and result lands in $OUT.
#
#   run(command="bash benchmarks/device_run.sh [all|tests|bench|probe|maxk|maxktrain|...]", carry=[".device_data"])
# all = CUDA tests + benchmark suite; probe = kernel config/chunk sweep (kernel_probe.py);
# maxk = MaxK-GNN kernels (Figure 8) + training epoch (pyg_tc/bench/maxk.py, args in $MAXK_ARGS);
# maxktrain = MaxK accuracy / epoch time on real datasets (pyg_tc/bench/maxk_train.py, $MAXKTRAIN_ARGS).
# tcgnn = TC-GNN kernels, auto/warps rules, SGT build, Table 6, GCN/AGNN training + accuracy (pyg_tc/bench/tcgnn.py, $TCGNN_ARGS).
# gat = fuseGNN fused attention: GAT/GATv2 layers vs PyG and unfused ops, fused fwd vs SpMM, 2-layer GAT training,
#       Table 3 (pyg_tc/bench/gat.py, $GAT_ARGS; ~7 min budget on an H200); gatacc = its accuracy part
#       (--part accuracy, $GATACC_ARGS). Run them in separate calls (5 files back each).
# sanitize = TC-GNN kernels under compute-sanitizer memcheck (benchmarks/sanitize_sgt.py).
# quick = TC-GNN SpMM vs the CSR kernel, warps 1-8 (benchmarks/sgt_quick.py, graphs in $QUICK_ARGS).
# stalls = Nsight Compute stall reasons / pipe use of the TC-GNN and CSR SpMM ($NCU_ARGS for ncu_probe.py).
# sass = SASS of the TC-GNN SpMM and Nsight Compute's source page (executed instructions per SASS
#        line) of one SpMM call per case in $SASS_CASES (graph[:native]/dtype:F, default tolokers/float32:16).
# halfprobe = HalfGNN SpMM/SDDMM per dtype, two-level on/off, config sweep (benchmarks/half_probe.py, $HALFPROBE_ARGS).
# half = HalfGNN suite: SpMM/SDDMM per dtype, 2-layer training steps fp32/fp16/bf16 vs PyG + autocast, accuracy
#        (pyg_tc/bench/half.py, $HALF_ARGS, e.g. --part train or --part accuracy).
# es = ES-SpMM accuracy of sampled inference per cap and strategy, training with sampling, the sampled
#      SpMM kernels vs cuSPARSE / exact / pre-sampled, 2-layer inference (pyg_tc/bench/es_spmm.py, $ES_ARGS,
#      e.g. --part accuracy,trainmode or --part kernels,infer).
# minibatch = NeighborLoader training per batch (sampling / transfer / format build / compute), PyG's layers vs
#      pyg_tc's on the same batches (pyg_tc/bench/minibatch.py, $MINIBATCH_ARGS; needs .device_data/wheels).
# graphcls = tutorials/05_graph_classification.py at full size (GIN on PROTEINS_full / ENZYMES DataLoader batches).
# ddp = tutorials/09_multi_gpu.py on every GPU count up to the machine's (Tolokers, products-shaped; $DDP_GRAPHS, $DDP_ARGS).
# overhead = host issue time / wall / launches of one layer and of the format build (benchmarks/layer_overhead.py).
# TEST_ARGS narrows the CUDA tests (default: the whole tests/ folder).
#
# .device_data/ holds a copy of ../shared/datasets (ignored by git, carried by
# the device tool because ../shared does not travel):
#   mkdir -p .device_data/datasets && cp -r ../shared/datasets/{planetoid,heterophilous,tu,misc} .device_data/datasets/
# (gat's PubMed topology: also planetoid_incomplete; without it Table 3 uses CiteSeer)
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
if [[ ",$MODE," == *,halfprobe,* ]]; then  # half SpMM/SDDMM: dtypes, two-level on/off, config sweep
  python benchmarks/half_probe.py --out "$OUT/half_probe.jsonl" ${HALFPROBE_ARGS:-} 2>&1 | tee "$OUT/half_probe.log" || rc=1
fi
if [[ ",$MODE," == *,ncu,* ]]; then  # profile (Firecracker machines only)
  ncu --clock-control none -k regex:"spmm_units|csrmm|cusparse|SpMM|sgt_spmm|sgt_reduce|sampled_spmm" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section InstructionStats \
      --section LaunchStats --metrics l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,dram__bytes_read.sum \
      python benchmarks/ncu_probe.py ${NCU_ARGS:-} > "$OUT/ncu.txt" 2>&1 || rc=1
  tail -5 "$OUT/ncu.txt"
fi
if [[ ",$MODE," == *,sass,* ]]; then  # SASS of the TC-GNN SpMM + per-instruction counts (ncu source page)
  # SASS_CASES: graph[:native]/dtype:F items; each gives sgt_spmm_<n>.sass and .csv
  so=$(find "$PYG_TC_BUILD_DIR" -name '*.so' | head -1)
  n=0
  for c in ${SASS_CASES:-tolokers/float32:16}; do
    g=${c%%/*}; dt=${c#*/}; d=${dt%%:*}; f=${dt##*:}
    case $d in float32) tn=f;; float16) tn=6__half;; *) tn=13__nv_bfloat16;; esac
    cuobjdump -sass "$so" | awk -v re="sgt_spmm_kernelI${tn}Li${f}ELb1ELb1E" '/Function : /{p = ($0 ~ re)} p' \
      > "$OUT/sgt_spmm_$n.sass" || rc=1
    ncu --clock-control none --cache-control none -k regex:"sgt_spmm" --launch-count 1 --section SourceCounters \
        --section InstructionStats --page source --print-source sass --csv python benchmarks/ncu_probe.py \
        --sgt=$g --cases=$dt > "$OUT/sgt_spmm_$n.csv" 2>&1 || rc=1
    tail -2 "$OUT/sgt_spmm_$n.csv"; n=$((n + 1))
  done
fi
if [[ ",$MODE," == *,quick,* ]]; then  # TCU vs CSR SpMM, warps 1-8 (benchmarks/sgt_quick.py)
  python benchmarks/sgt_quick.py ${QUICK_ARGS:-} 2>&1 | tee "$OUT/quick.log" || rc=1
fi
if [[ ",$MODE," == *,stalls,* ]]; then  # warp stall reasons and pipe use of the TCU / CSR SpMM (L2 kept warm)
  a=${NCU_ARGS:---sgt=proteins:native,tolokers --cases=float32:16,float32:32}
  ncu --clock-control none --cache-control none -k regex:"sgt_spmm|spmm_units|sgt_reduce" --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy \
      --section InstructionStats python benchmarks/ncu_probe.py $a > "$OUT/stalls.txt" 2>&1 || rc=1
  ncu --clock-control none --cache-control none -k regex:"sgt_spmm|spmm_units|sgt_reduce" --csv \
      --metrics "regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
      python benchmarks/ncu_probe.py $a > "$OUT/stalls.csv" 2>&1 || rc=1
  tail -3 "$OUT/stalls.csv"
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
if [[ ",$MODE," == *,gat,* ]]; then
  python -m pyg_tc.bench.gat --out "$OUT/gat" ${GAT_ARGS:-} 2>&1 | tee "$OUT/gat.log" || rc=1
fi
if [[ ",$MODE," == *,gatacc,* ]]; then
  python -m pyg_tc.bench.gat --part accuracy --out "$OUT/gat" ${GATACC_ARGS:-} 2>&1 | tee "$OUT/gat_accuracy.log" || rc=1
fi
if [[ ",$MODE," == *,half,* ]]; then  # HalfGNN suite: kernels, training steps, accuracy ($HALF_ARGS)
  python -m pyg_tc.bench.half --out "$OUT/half" ${HALF_ARGS:-} 2>&1 | tee "$OUT/half.log" || rc=1
fi
if [[ ",$MODE," == *,es,* ]]; then  # ES-SpMM sampled-inference accuracy table ($ES_ARGS)
  python -m pyg_tc.bench.es_spmm --out "$OUT/es" ${ES_ARGS:-} 2>&1 | tee "$OUT/es.log" || rc=1
fi
if [[ ",$MODE," == *,overhead,* ]]; then  # host cost of one layer / the format build on a mini-batch-sized graph
  python benchmarks/layer_overhead.py ${OVERHEAD_ARGS:-} 2>&1 | tee "$OUT/overhead.log" || rc=1
fi
if [[ ",$MODE," == *,graphcls,* ]]; then  # tutorial 5 at full size: DataLoader GIN, PyG vs pyg_tc ($GRAPHCLS_ARGS)
  rm -rf /tmp/tut && mkdir -p /tmp/tut && cp -r "$PYG_TC_SHARED/datasets/tu" /tmp/tut/
  python tutorials/05_graph_classification.py --root /tmp/tut ${GRAPHCLS_ARGS:-} 2>&1 | tee "$OUT/graphcls.log" || rc=1
fi
if [[ ",$MODE," == *,ddp,* ]]; then  # tutorial 9: DDP + per-rank NeighborLoader, 1..N GPUs, PyG vs pyg_tc ($DDP_ARGS)
  python -m pip install -q --no-deps .device_data/wheels/*.whl 2>&1 | tail -2
  rm -rf /tmp/tut && mkdir -p /tmp/tut && cp -r "$PYG_TC_SHARED/datasets/heterophilous" "$PYG_TC_SHARED/datasets/planetoid" /tmp/tut/
  ngpu=$(nvidia-smi -L | wc -l); counts=$(seq -s, 1 "$ngpu")
  for g in ${DDP_GRAPHS:-tolokers products}; do
    NCCL_NVLS_ENABLE=0 python tutorials/09_multi_gpu.py --root /tmp/tut --graph "$g" --scaling "$counts" ${DDP_ARGS:-} 2>&1 | tee -a "$OUT/ddp.log" || rc=1
  done
fi
if [[ ",$MODE," == *,minibatch,* ]]; then  # NeighborLoader training, PyG vs pyg_tc on the same batches ($MINIBATCH_ARGS)
  # the sampler backend: torch_scatter / torch_sparse wheels for this machine, carried in .device_data/wheels
  # (cp ../shared/wheels/gpu-machine/*.whl .device_data/wheels/)
  python -m pip install -q --no-deps .device_data/wheels/*.whl 2>&1 | tail -2
  python -m pyg_tc.bench.minibatch --out "$OUT/minibatch" ${MINIBATCH_ARGS:-} 2>&1 | tee "$OUT/minibatch.log" || rc=1
fi
if [[ ",$MODE," == *,bench,* || "$MODE" == all ]]; then
  python -m pyg_tc bench --out "$OUT/bench" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" || rc=1
fi
exit $rc

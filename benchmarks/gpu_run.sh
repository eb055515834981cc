#!/usr/bin/env bash
# Build the kernels, run the CUDA tests and benchmark suites on a CUDA machine,
# and write every log and result to one folder.
#
#   bash benchmarks/gpu_run.sh OUTDIR [SUITE ...] [--data DIR] [--wheels DIR]
#
# Run it from the repository root. OUTDIR is created if needed. SUITEs may also
# be given comma-separated (tests,bench); the default is `all` (= tests bench).
#
#   --data DIR    datasets folder for the suites and tests that read real graphs
#                 (laid out as planetoid/Cora/raw, tu/PROTEINS_full, heterophilous/...,
#                 misc/...); default: $PYG_TC_DATA. Without it those parts skip or use
#                 synthetic graphs.
#   --wheels DIR  pip-install every *.whl in DIR first (--no-deps), e.g. torch_sparse /
#                 torch_scatter built for this machine: the NeighborLoader sampler of
#                 the minibatch and ddp suites needs one of them (or pyg-lib).
#   -h, --help    this text.
#
# Suites (extra arguments of each from the variable named after it):
#   tests      pytest -m cuda over tests/ (TEST_ARGS: paths / pytest options, default: tests)
#   bench      pyg-tc bench: SpMM vs cuSPARSE + training steps (BENCH_ARGS)
#   probe      kernel configs / chunk-size sweep and peak memory per stage
#              (benchmarks/probes/kernel_probe.py PROBE_ARGS, benchmarks/probes/memory_probe.py)
#   cbsr       MaxK-GNN: CBSR kernels (Figure 8) + training epoch (benchmarks.suites.cbsr, CBSR_ARGS)
#   cbsrtrain  MaxK-GNN: MaxK accuracy / epoch time on real datasets (benchmarks.suites.cbsr_train,
#              CBSRTRAIN_ARGS)
#   sgt        TC-GNN: SGT kernels, auto / warps rules, SGT build, Table 6, GCN / AGNN training and
#              accuracy (benchmarks.suites.sgt, SGT_ARGS)
#   quick      TC-GNN SpMM vs the CSR kernel, 1-8 warps per unit (benchmarks/probes/sgt_quick.py, QUICK_ARGS)
#   sgtprobe   TC-GNN unit-size x warps sweeps (benchmarks/probes/sgt_probe.py, SGTPROBE_ARGS)
#   sanitize   TC-GNN kernels under compute-sanitizer memcheck and racecheck (benchmarks/probes/sanitize_sgt.py)
#   ncu        Nsight Compute sections of the SpMM kernels (benchmarks/probes/ncu_probe.py, NCU_ARGS)
#   stalls     Nsight Compute stall reasons / pipe use of the TC-GNN and CSR SpMM (NCU_ARGS)
#   sass       SASS of the TC-GNN SpMM with executed instructions per SASS line, one SpMM call per
#              case in SASS_CASES (graph[:native]/dtype:F items, default tolokers/float32:16)
#   gat        fuseGNN: GAT / GATv2 layers vs PyG and the unfused ops, fused forward vs SpMM,
#              2-layer GAT training, Table 3 (benchmarks.suites.gat, GAT_ARGS)
#   gatacc     the accuracy part of the same suite (GATACC_ARGS)
#   half       HalfGNN: SpMM / SDDMM per dtype, training steps fp32 / fp16 / bf16 vs PyG + autocast,
#              accuracy (benchmarks.suites.half, HALF_ARGS, e.g. --part train)
#   halfprobe  half SpMM / SDDMM per dtype, two-level sum on / off, config sweep
#              (benchmarks/probes/half_probe.py, HALFPROBE_ARGS)
#   es         ES-SpMM: sampled-inference accuracy per cap and strategy, training with sampling,
#              sampled SpMM kernels, 2-layer inference (benchmarks.suites.es_spmm, ES_ARGS,
#              e.g. --part kernels,infer)
#   minibatch  NeighborLoader training per batch, PyG's layers vs pyg_tc's on the same batches
#              (benchmarks.suites.minibatch, MINIBATCH_ARGS; needs a sampler backend, see --wheels)
#   overhead   host issue time / launches of one layer and of the format build
#              (benchmarks/probes/layer_overhead.py, OVERHEAD_ARGS)
#   graphcls   tutorials/05_graph_classification.py at full size (GRAPHCLS_ARGS; needs --data with tu/)
#   ddp        tutorials/09_multi_gpu.py on 1..N GPUs for each graph in DDP_GRAPHS (default
#              "tolokers products"; DDP_ARGS; needs --data with heterophilous/ and planetoid/)
#   all        tests bench
#
# OUTDIR receives info.txt (GPU, driver, clocks, commit, date, pyg_tc.info()) and one log per
# suite (tests.log, bench.log, ...); the suites with result files write them to a subfolder
# (OUTDIR/bench, OUTDIR/cbsr, ...). The exit status is non-zero if any suite failed.
#
# Examples:
#   bash benchmarks/gpu_run.sh gpu_out                                   # CUDA tests + benchmark
#   bash benchmarks/gpu_run.sh gpu_out tests --data ~/datasets
#   TEST_ARGS=tests/ops bash benchmarks/gpu_run.sh gpu_out tests
#   CBSR_ARGS="--graphs reddit --ks 16" bash benchmarks/gpu_run.sh gpu_out cbsr
#   bash benchmarks/gpu_run.sh gpu_out minibatch --data ~/datasets --wheels ~/wheels
#   PYG_TC_BUILD_DIR=/tmp/pyg_tc_build bash benchmarks/gpu_run.sh "$OUTDIR" tests,bench
set -u -o pipefail

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

SUITES_KNOWN="tests bench probe cbsr cbsrtrain sgt quick sgtprobe sanitize ncu stalls sass gat gatacc
half halfprobe es minibatch overhead graphcls ddp all"
OUTDIR=
DATA=${PYG_TC_DATA:-}
WHEELS=
SUITES=
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --data) [ $# -ge 2 ] || { echo "gpu_run.sh: --data needs a folder" >&2; exit 2; }; DATA=$2; shift 2 ;;
    --data=*) DATA=${1#--data=}; shift ;;
    --wheels) [ $# -ge 2 ] || { echo "gpu_run.sh: --wheels needs a folder" >&2; exit 2; }; WHEELS=$2; shift 2 ;;
    --wheels=*) WHEELS=${1#--wheels=}; shift ;;
    -*) echo "gpu_run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) if [ -z "$OUTDIR" ]; then OUTDIR=$1; else SUITES="$SUITES ${1//,/ }"; fi; shift ;;
  esac
done
if [ -z "$OUTDIR" ]; then
  echo "usage: bash benchmarks/gpu_run.sh OUTDIR [SUITE ...] [--data DIR] [--wheels DIR] (--help: suites)" >&2
  exit 2
fi
SUITES=${SUITES:-all}
for s in $SUITES; do
  case " $(echo $SUITES_KNOWN) " in
    *" $s "*) ;;
    *) echo "gpu_run.sh: unknown suite '$s'; one of: $(echo $SUITES_KNOWN)" >&2; exit 2 ;;
  esac
done
want() { case " $SUITES " in *" $1 "*) return 0 ;; esac; [ "$1" = tests -o "$1" = bench ] && case " $SUITES " in *" all "*) return 0 ;; esac; return 1; }

[ -f pyg_tc/__init__.py ] || { echo "gpu_run.sh: run it from the repository root" >&2; exit 2; }
command -v nvidia-smi > /dev/null || { echo "gpu_run.sh: nvidia-smi not found: this script needs a CUDA machine" >&2; exit 2; }
if [ -n "$DATA" ]; then
  [ -d "$DATA" ] || { echo "gpu_run.sh: data folder $DATA does not exist" >&2; exit 2; }
  DATA=$(cd "$DATA" && pwd); export PYG_TC_DATA=$DATA
fi
if [ -n "$WHEELS" ]; then
  [ -d "$WHEELS" ] || { echo "gpu_run.sh: wheels folder $WHEELS does not exist" >&2; exit 2; }
  WHEELS=$(cd "$WHEELS" && pwd)
fi
mkdir -p "$OUTDIR" && OUT=$(cd "$OUTDIR" && pwd) || exit 2
PY=${PYTHON:-python}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
TMP=$(mktemp -d) && trap 'rm -rf "$TMP"' EXIT

needs_data() {  # needs_data SUITE SUBFOLDER...
  local s=$1; shift
  [ -n "${PYG_TC_DATA:-}" ] || { echo "[$s] needs a datasets folder: --data DIR or PYG_TC_DATA" >&2; return 1; }
  for d in "$@"; do
    [ -d "$PYG_TC_DATA/$d" ] || { echo "[$s] $PYG_TC_DATA/$d not found" >&2; return 1; }
  done
}

# --- environment: recorded once, before anything is built ---------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo 'not a git checkout')$( [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (with uncommitted changes)')"
  echo "suites: $SUITES"
  echo "data: ${PYG_TC_DATA:-none}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
} 2>&1 | tee "$OUT/info.txt"
if [ -n "$WHEELS" ]; then
  $PY -m pip install -q --no-deps "$WHEELS"/*.whl 2>&1 | tail -2 | tee -a "$OUT/info.txt"
fi
t0=$(date +%s)
$PY -c "import pyg_tc, json; print(json.dumps(pyg_tc.info(), indent=1))" 2>&1 | tee -a "$OUT/info.txt" || exit 1
echo "build + import: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/info.txt"

rc=0
if want probe; then
  $PY benchmarks/probes/kernel_probe.py ${PROBE_ARGS:-} 2>&1 | tee "$OUT/probe.log" || rc=1
  $PY benchmarks/probes/memory_probe.py 2>&1 | tee -a "$OUT/probe.log" || rc=1
fi
if want halfprobe; then
  $PY benchmarks/probes/half_probe.py --out "$OUT/half_probe.jsonl" ${HALFPROBE_ARGS:-} 2>&1 | tee "$OUT/halfprobe.log" || rc=1
fi
if want ncu; then
  ncu --clock-control none -k regex:"spmm_units|csrmm|cusparse|SpMM|sgt_spmm|sgt_reduce|sampled_spmm" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section InstructionStats \
      --section LaunchStats --metrics l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,dram__bytes_read.sum \
      $PY benchmarks/probes/ncu_probe.py ${NCU_ARGS:-} > "$OUT/ncu.txt" 2>&1 || rc=1
  tail -5 "$OUT/ncu.txt"
fi
if want sass; then  # one .sass and one .csv per case in SASS_CASES
  build_dir=$($PY -c "from pyg_tc import _kernels; print(_kernels.build_dir())")
  so=$(find "$build_dir" -name '*.so' 2>/dev/null | head -1)
  if [ -z "$so" ]; then echo "[sass] no built kernel library under '$build_dir'" >&2; rc=1; else
    n=0
    for c in ${SASS_CASES:-tolokers/float32:16}; do
      g=${c%%/*}; dt=${c#*/}; d=${dt%%:*}; f=${dt##*:}
      case $d in float32) tn=f;; float16) tn=6__half;; *) tn=13__nv_bfloat16;; esac
      cuobjdump -sass "$so" | awk -v re="sgt_spmm_kernelI${tn}Li${f}ELb1ELb1E" '/Function : /{p = ($0 ~ re)} p' \
        > "$OUT/sgt_spmm_$n.sass" || rc=1
      ncu --clock-control none --cache-control none -k regex:"sgt_spmm" --launch-count 1 --section SourceCounters \
          --section InstructionStats --page source --print-source sass --csv $PY benchmarks/probes/ncu_probe.py \
          --sgt=$g --cases=$dt > "$OUT/sgt_spmm_$n.csv" 2>&1 || rc=1
      tail -2 "$OUT/sgt_spmm_$n.csv"; n=$((n + 1))
    done
  fi
fi
if want quick; then
  $PY benchmarks/probes/sgt_quick.py ${QUICK_ARGS:-} 2>&1 | tee "$OUT/quick.log" || rc=1
fi
if want stalls; then  # L2 kept warm between the profiled calls
  a=${NCU_ARGS:---sgt=proteins:native,tolokers --cases=float32:16,float32:32}
  ncu --clock-control none --cache-control none -k regex:"sgt_spmm|spmm_units|sgt_reduce" --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy \
      --section InstructionStats $PY benchmarks/probes/ncu_probe.py $a > "$OUT/stalls.txt" 2>&1 || rc=1
  ncu --clock-control none --cache-control none -k regex:"sgt_spmm|spmm_units|sgt_reduce" --csv \
      --metrics "regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
      $PY benchmarks/probes/ncu_probe.py $a > "$OUT/stalls.csv" 2>&1 || rc=1
  tail -3 "$OUT/stalls.csv"
fi
if want sgtprobe; then
  $PY benchmarks/probes/sgt_probe.py ${SGTPROBE_ARGS:-} 2>&1 | tee "$OUT/sgtprobe.log" || rc=1
fi
if want sanitize; then  # memcheck, then shared-memory hazards of the staged (cp.async) SpMM pipeline
  compute-sanitizer --tool memcheck --error-exitcode 9 $PY benchmarks/probes/sanitize_sgt.py 2>&1 | tail -30 | tee "$OUT/sanitize.log" || rc=1
  compute-sanitizer --tool racecheck --error-exitcode 9 $PY benchmarks/probes/sanitize_sgt.py quick 2>&1 | tail -30 | tee -a "$OUT/sanitize.log" || rc=1
fi
if want tests; then
  timeout_arg=; $PY -c "import pytest_timeout" 2> /dev/null && timeout_arg=--timeout=900
  $PY -m pytest -q -rf -m cuda $timeout_arg ${TEST_ARGS:-tests} -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" || rc=1
fi
if want cbsr; then
  $PY -m benchmarks.suites.cbsr --out "$OUT/cbsr" ${CBSR_ARGS:-} 2>&1 | tee "$OUT/cbsr.log" || rc=1
fi
if want cbsrtrain; then
  $PY -m benchmarks.suites.cbsr_train --out "$OUT/cbsr_train" ${CBSRTRAIN_ARGS:-} 2>&1 | tee "$OUT/cbsrtrain.log" || rc=1
fi
if want sgt; then
  $PY -m benchmarks.suites.sgt --out "$OUT/sgt" ${SGT_ARGS:-} 2>&1 | tee "$OUT/sgt.log" || rc=1
fi
if want gat; then
  $PY -m benchmarks.suites.gat --out "$OUT/gat" ${GAT_ARGS:-} 2>&1 | tee "$OUT/gat.log" || rc=1
fi
if want gatacc; then
  $PY -m benchmarks.suites.gat --part accuracy --out "$OUT/gat" ${GATACC_ARGS:-} 2>&1 | tee "$OUT/gatacc.log" || rc=1
fi
if want half; then
  $PY -m benchmarks.suites.half --out "$OUT/half" ${HALF_ARGS:-} 2>&1 | tee "$OUT/half.log" || rc=1
fi
if want es; then
  $PY -m benchmarks.suites.es_spmm --out "$OUT/es" ${ES_ARGS:-} 2>&1 | tee "$OUT/es.log" || rc=1
fi
if want overhead; then
  $PY benchmarks/probes/layer_overhead.py ${OVERHEAD_ARGS:-} 2>&1 | tee "$OUT/overhead.log" || rc=1
fi
if want graphcls; then  # the tutorial writes processed/ next to raw/: it gets a copy of the data
  if needs_data graphcls tu; then
    mkdir -p "$TMP/graphcls" && cp -r "$PYG_TC_DATA/tu" "$TMP/graphcls/"
    $PY tutorials/05_graph_classification.py --root "$TMP/graphcls" ${GRAPHCLS_ARGS:-} 2>&1 | tee "$OUT/graphcls.log" || rc=1
  else rc=1; fi
fi
if want ddp; then
  if needs_data ddp heterophilous planetoid; then
    mkdir -p "$TMP/ddp" && cp -r "$PYG_TC_DATA/heterophilous" "$PYG_TC_DATA/planetoid" "$TMP/ddp/"
    ngpu=$(nvidia-smi -L | wc -l); counts=$(seq -s, 1 "$ngpu")
    for g in ${DDP_GRAPHS:-tolokers products}; do
      NCCL_NVLS_ENABLE=0 $PY tutorials/09_multi_gpu.py --root "$TMP/ddp" --graph "$g" --scaling "$counts" ${DDP_ARGS:-} \
        2>&1 | tee -a "$OUT/ddp.log" || rc=1
    done
  else rc=1; fi
fi
if want minibatch; then
  $PY -m benchmarks.suites.minibatch --out "$OUT/minibatch" ${MINIBATCH_ARGS:-} 2>&1 | tee "$OUT/minibatch.log" || rc=1
fi
if want bench; then
  $PY -m pyg_tc bench --out "$OUT/bench" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" || rc=1
fi
echo "gpu_run.sh: suites [$SUITES] done, logs in $OUT (exit $rc)"
exit $rc

// The launch settings read by the entry points: the rules that depend on the
// GPU (cooperative mode) and the overrides of the measured rules, set once
// from Python (pyg_tc/_kernels.py reads the PYG_TC_* environment variables
// when it loads this library, and pyg_tc.testing.kernel_overrides sets them
// for sweeps and tests). No entry point reads the environment.
#pragma once

#include <cstdint>

namespace pyg_tc {

// A value of -1 (or 0 for the counts) means: the measured rule decides.
struct LaunchOverrides {
  int spmm_lanes = 0;       // csr SpMM lanes per unit (4, 8, 16, 32) ...
  int spmm_vectors = 0;     // ... and 16-byte vectors per lane (1, 2); both or neither
  int spmm_coop = -1;       // cooperative mode off (0) / on (1)
  int spmm_two_level = -1;  // the half two-level sum off (0) / on (1)
  int sddmm_inflight = 0;   // csr SDDMM edges in flight per lane (4, 8)
  int cbsr_pair = -1;       // maxk CBSR SpMM paired loads off (0) / allowed (1)
  int attn_nv4 = -1;        // attention: four 16-byte vectors per lane off (0, where a head fits 32 lanes) / on (1)
};

// The overrides in force (one process-wide value).
const LaunchOverrides& launch_overrides();

// Graphs with fewer schedule units than this run the csr SpMM in cooperative
// mode (a whole warp per unit): about two resident units per lane group of
// the whole GPU, 256 per SM. Python reads it through pyg_tc_coop_units (the
// schedule builder's default chunk, the attention schedules).
int64_t coop_units(int device);

}  // namespace pyg_tc

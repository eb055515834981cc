// The launch settings of launch_config.h and their C interface, called from
// Python through ctypes (pyg_tc/_kernels.py): no exception crosses it.
#include "common/launch_config.h"

#include <cstring>

#include "common/host.h"

namespace pyg_tc {
namespace {
LaunchOverrides g_overrides;
}  // namespace

const LaunchOverrides& launch_overrides() { return g_overrides; }

int64_t coop_units(int device) {
  return (int64_t)device_attr<cudaDevAttrMultiProcessorCount>(device) * 256;
}

}  // namespace pyg_tc

extern "C" {

// Sets one override (`name` as in LaunchOverrides; for "spmm_config", a is the
// lanes and b the vectors); -1 (0, 0 for spmm_config) restores the rule.
// Returns 0, or -1 for an unknown name, -2 for a value out of range.
int pyg_tc_set_override(const char* name, int64_t a, int64_t b) {
  auto& o = pyg_tc::g_overrides;
  const bool rule = a == -1;
  if (std::strcmp(name, "spmm_config") == 0) {
    const bool ok = (a == 0 && b == 0) ||
                    ((a == 4 || a == 8 || a == 16 || a == 32) && (b == 1 || b == 2));
    if (!ok) return -2;
    o.spmm_lanes = (int)a;
    o.spmm_vectors = (int)b;
    return 0;
  }
  if (std::strcmp(name, "sddmm_inflight") == 0) {
    if (!(rule || a == 4 || a == 8)) return -2;
    o.sddmm_inflight = rule ? 0 : (int)a;
    return 0;
  }
  int* flag = std::strcmp(name, "spmm_coop") == 0        ? &o.spmm_coop
              : std::strcmp(name, "spmm_two_level") == 0 ? &o.spmm_two_level
              : std::strcmp(name, "cbsr_pair") == 0      ? &o.cbsr_pair
              : std::strcmp(name, "attn_nv4") == 0       ? &o.attn_nv4
                                                         : nullptr;
  if (flag == nullptr) return -1;
  if (!(rule || a == 0 || a == 1)) return -2;
  *flag = (int)a;
  return 0;
}

// coop_units(device), or -1 where the device cannot be asked.
int64_t pyg_tc_coop_units(int device) {
  try {
    return pyg_tc::coop_units(device);
  } catch (...) {
    return -1;
  }
}

}  // extern "C"

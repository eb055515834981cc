// The GPU half of the CSR format builders (pyg_tc/formats/csr.py, which also
// defines the ops beside their references), the same tensors bit for bit:
//
//   csr_transpose(col, rows, num_cols) -> (t_rowptr, t_col, t_perm):
//     a stable radix sort of the sources (cub, over the bits of num_cols),
//     then one kernel writes t_rowptr from the sorted keys' boundaries and
//     gathers t_col; no synchronisation.
//   csr_schedules(rowptrs, chunk) -> [units, heavy_rows, heavy_ptr]... + [slots]:
//     the degree-bucket schedule of each rowptr: units per row
//     (ceil(deg / chunk), at least one), three exclusive scans (units, heavy
//     slots, heavy rows), one synchronisation for the sizes of all of them,
//     one kernel writing the units in row order, a stable radix sort by
//     length (longest first), one gather.
//   csr_padded_schedules(rowptrs, chunk, num_edges) -> [units, heavy_rows, heavy_ptr]...:
//     the same schedules with array sizes fixed by (rows, num_edges, chunk)
//     and filler entries (formats/csr.py's padded_schedule, its reference):
//     the same kernels, one more writing the fillers, no synchronisation, so
//     it runs inside a CUDA graph capture.
//   csr_pad_hops(rowptr, col, num_nodes, num_edges, pad_nodes, pad_edges)
//     -> [rowptr, col, rows, node_index, edge_index, node_mask]: a sampled
//     batch's CSR padded hop by hop (formats/csr.py's pad_hops_reference),
//     one launch (the block offsets in its params), no synchronisation.
// A format build is about 15 launches and one synchronisation.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <climits>
#include <string>
#include <tuple>
#include <vector>

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) { return (unsigned)((n + kThreads - 1) / kThreads + (n == 0)); }

inline int bits_for(int64_t n) {  // bits of the largest key below n (at least 1)
  int b = 1;
  while (b < 31 && (int64_t(1) << b) < n) ++b;
  return b;
}

at::Tensor temp_bytes(size_t n, const at::Tensor& like) {
  return at::empty({(int64_t)std::max<size_t>(n, 1)}, like.options().dtype(at::kByte));
}

template <typename K, typename V>
void sort_pairs(const K* kin, K* kout, const V* vin, V* vout, int64_t n, int end_bit, const at::Tensor& like,
                cudaStream_t stream) {
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, kin, kout, vin, vout, (int)n, 0, end_bit, stream));
  auto temp = temp_bytes(bytes, like);
  C10_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp.data_ptr(), bytes, kin, kout, vin, vout, (int)n, 0, end_bit, stream));
}

void exclusive_sum(const int* in, int* out, int64_t n, const at::Tensor& like, cudaStream_t stream) {
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, (int)n, stream));
  auto temp = temp_bytes(bytes, like);
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data_ptr(), bytes, in, out, (int)n, stream));
}

__global__ void iota(int* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = (int)i;
}

// t_rowptr[v] = first position of key v in the sorted keys (E past the last);
// t_col[i] = rows[t_perm[i]].
__global__ void transpose_finish(const unsigned* __restrict__ keys, const int* __restrict__ perm,
                                 const int* __restrict__ rows, int64_t E, int64_t C, int* __restrict__ t_rowptr,
                                 int* __restrict__ t_col) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i > E) return;
  const int64_t prev = i > 0 ? (int64_t)keys[i - 1] : -1;
  const int64_t cur = i < E ? (int64_t)keys[i] : C;
  for (int64_t v = prev + 1; v <= cur; ++v) t_rowptr[v] = (int)i;
  if (i < E) t_col[i] = rows[perm[i]];
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_transpose_cuda(const at::Tensor& col, const at::Tensor& rows,
                                                                  int64_t num_cols) {
  TORCH_CHECK(col.is_cuda() && rows.is_cuda() && col.scalar_type() == at::kInt && rows.scalar_type() == at::kInt &&
                  col.dim() == 1 && col.sizes() == rows.sizes(),
              "pyg_tc: csr_transpose needs int32 CUDA col and rows of one length");
  c10::cuda::CUDAGuard guard(col.device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t E = col.numel(), C = num_cols;
  TORCH_CHECK(E < (1ll << 31) && C < (1ll << 31), "pyg_tc: csr_transpose supports fewer than 2^31 edges and nodes");
  const auto c = col.contiguous(), r = rows.contiguous();
  auto opts = c.options();
  auto keys = at::empty({E}, opts);
  auto ids = at::empty({E}, opts);
  auto t_perm = at::empty({E}, opts);
  auto t_rowptr = at::empty({C + 1}, opts);
  auto t_col = at::empty({E}, opts);
  if (E > 0) {
    iota<<<blocks_for(E), kThreads, 0, stream>>>(ids.data_ptr<int>(), E);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    sort_pairs(reinterpret_cast<const unsigned*>(c.data_ptr<int>()), reinterpret_cast<unsigned*>(keys.data_ptr<int>()),
               ids.data_ptr<int>(), t_perm.data_ptr<int>(), E, bits_for(C), c, stream);
  }
  transpose_finish<<<blocks_for(E + 1), kThreads, 0, stream>>>(reinterpret_cast<const unsigned*>(keys.data_ptr<int>()),
                                                               t_perm.data_ptr<int>(), r.data_ptr<int>(), E, C,
                                                               t_rowptr.data_ptr<int>(), t_col.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {t_rowptr, t_col, t_perm};
}

// Per row v < R: its unit count n (ceil(deg / chunk), at least 1), n again
// when heavy (n > 1) else 0, and the heavy flag; entry R is 0 (the scans'
// totals).
__global__ void schedule_count(const int* __restrict__ rowptr, int64_t R, int chunk, int* __restrict__ n_units,
                               int* __restrict__ n_slots, int* __restrict__ heavy) {
  const int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (v > R) return;
  int n = 0;
  if (v < R) {
    const int d = rowptr[v + 1] - rowptr[v];
    n = d > chunk ? (d + chunk - 1) / chunk : 1;
  }
  n_units[v] = n;
  n_slots[v] = n > 1 ? n : 0;
  heavy[v] = n > 1;
}

__global__ void schedule_fill(const int* __restrict__ rowptr, int64_t R, int chunk, const int* __restrict__ uoff,
                              const int* __restrict__ soff, const int* __restrict__ hidx, int4* __restrict__ units,
                              unsigned* __restrict__ keys, int* __restrict__ ids, int* __restrict__ heavy_rows,
                              int* __restrict__ heavy_ptr) {
  const int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (v == 0) heavy_ptr[0] = 0;
  if (v >= R) return;
  const int n = uoff[v + 1] - uoff[v], end_row = rowptr[v + 1];
  const bool is_heavy = n > 1;
  for (int k = 0; k < n; ++k) {
    const int u = uoff[v] + k;
    const int start = rowptr[v] + k * chunk;
    const int end = min(start + chunk, end_row);
    units[u] = make_int4((int)v, start, end, is_heavy ? soff[v] + k : -1);
    keys[u] = (unsigned)(chunk - (end - start));  // ascending key = longest first
    ids[u] = u;
  }
  if (is_heavy) {
    heavy_rows[hidx[v]] = (int)v;
    heavy_ptr[hidx[v] + 1] = soff[v] + n;
  }
}

__global__ void gather_units(const int4* __restrict__ in, const int* __restrict__ order, int64_t U,
                             int4* __restrict__ out) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < U) out[i] = in[order[i]];
}

// A padded schedule's fillers (padded_schedule): units past the real ones
// are (R - 1, E, E, a spare slot after the real heavy slots), of length 0;
// heavy entries past the real ones are (R - 1, an empty slot range).
// schedule_fill then writes the real entries.
__global__ void schedule_fillers(const int* __restrict__ rowptr, int64_t R, int chunk, int64_t U, int64_t H,
                                 const int* __restrict__ uoff, const int* __restrict__ soff, int4* __restrict__ units,
                                 unsigned* __restrict__ keys, int* __restrict__ ids, int* __restrict__ heavy_rows,
                                 int* __restrict__ heavy_ptr) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int real_units = uoff[R], real_slots = soff[R], E = rowptr[R];
  if (i >= real_units && i < U) {
    units[i] = make_int4((int)(R - 1), E, E, real_slots + (int)(i - real_units));
    keys[i] = (unsigned)chunk;
    ids[i] = (int)i;
  }
  if (i < H) {
    heavy_rows[i] = (int)(R - 1);
    heavy_ptr[i + 1] = real_slots;
  }
}

std::vector<at::Tensor> csr_schedules_cuda(at::TensorList rowptrs, int64_t chunk) {
  TORCH_CHECK(chunk >= 1 && chunk < (1 << 30), "pyg_tc: csr_schedules: chunk must be positive");
  const int64_t M = (int64_t)rowptrs.size();
  std::vector<at::Tensor> out;
  if (M == 0) return {at::empty({0}, at::TensorOptions().dtype(at::kLong))};
  c10::cuda::CUDAGuard guard(rowptrs[0].device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto opts = rowptrs[0].options().dtype(at::kInt);
  std::vector<at::Tensor> rps, n_units, n_slots, heavy, uoff, soff, hidx;
  auto sizes_dev = at::empty({3 * M}, opts);
  for (int64_t m = 0; m < M; ++m) {
    const auto& rp = rowptrs[m];
    TORCH_CHECK(rp.is_cuda() && rp.scalar_type() == at::kInt && rp.dim() == 1 && rp.numel() >= 1,
                "pyg_tc: csr_schedules needs int32 CUDA rowptrs");
    rps.push_back(rp.contiguous());
    const int64_t R = rp.numel() - 1;
    for (auto* v : {&n_units, &n_slots, &heavy, &uoff, &soff, &hidx}) v->push_back(at::empty({R + 1}, opts));
    schedule_count<<<blocks_for(R + 1), kThreads, 0, stream>>>(rps[m].data_ptr<int>(), R, (int)chunk,
                                                               n_units[m].data_ptr<int>(), n_slots[m].data_ptr<int>(),
                                                               heavy[m].data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    exclusive_sum(n_units[m].data_ptr<int>(), uoff[m].data_ptr<int>(), R + 1, rp, stream);
    exclusive_sum(n_slots[m].data_ptr<int>(), soff[m].data_ptr<int>(), R + 1, rp, stream);
    exclusive_sum(heavy[m].data_ptr<int>(), hidx[m].data_ptr<int>(), R + 1, rp, stream);
    for (int j = 0; j < 3; ++j) {
      const auto& src = j == 0 ? uoff[m] : j == 1 ? soff[m] : hidx[m];
      C10_CUDA_CHECK(cudaMemcpyAsync(sizes_dev.data_ptr<int>() + 3 * m + j, src.data_ptr<int>() + R, sizeof(int),
                                     cudaMemcpyDeviceToDevice, stream));
    }
  }
  // The one synchronisation: units, slots and heavy rows of every schedule.
  auto sizes = at::empty({3 * M}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  C10_CUDA_CHECK(cudaMemcpyAsync(sizes.data_ptr<int>(), sizes_dev.data_ptr<int>(), 3 * M * sizeof(int),
                                 cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int* sz = sizes.data_ptr<int>();
  auto slots = at::empty({M}, at::TensorOptions().dtype(at::kLong));
  for (int64_t m = 0; m < M; ++m) {
    const int64_t R = rps[m].numel() - 1, U = sz[3 * m], S = sz[3 * m + 1], H = sz[3 * m + 2];
    auto tmp = at::empty({U, 4}, opts), units = at::empty({U, 4}, opts);
    auto keys = at::empty({U}, opts), keys_out = at::empty({U}, opts);
    auto ids = at::empty({U}, opts), order = at::empty({U}, opts);
    auto heavy_rows = at::empty({H}, opts), heavy_ptr = at::empty({H + 1}, opts);
    schedule_fill<<<blocks_for(R), kThreads, 0, stream>>>(
        rps[m].data_ptr<int>(), R, (int)chunk, uoff[m].data_ptr<int>(), soff[m].data_ptr<int>(),
        hidx[m].data_ptr<int>(), reinterpret_cast<int4*>(tmp.data_ptr<int>()),
        reinterpret_cast<unsigned*>(keys.data_ptr<int>()), ids.data_ptr<int>(), heavy_rows.data_ptr<int>(),
        heavy_ptr.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (U > 0) {
      sort_pairs(reinterpret_cast<const unsigned*>(keys.data_ptr<int>()),
                 reinterpret_cast<unsigned*>(keys_out.data_ptr<int>()), ids.data_ptr<int>(), order.data_ptr<int>(), U,
                 bits_for(chunk + 1), rps[m], stream);
      gather_units<<<blocks_for(U), kThreads, 0, stream>>>(reinterpret_cast<const int4*>(tmp.data_ptr<int>()),
                                                           order.data_ptr<int>(), U,
                                                           reinterpret_cast<int4*>(units.data_ptr<int>()));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    out.push_back(units);
    out.push_back(heavy_rows);
    out.push_back(heavy_ptr);
    slots.data_ptr<int64_t>()[m] = S;
  }
  out.push_back(slots);
  return out;
}

std::vector<at::Tensor> csr_padded_schedules_cuda(at::TensorList rowptrs, int64_t chunk, int64_t num_edges) {
  TORCH_CHECK(chunk >= 1 && chunk < (1 << 30), "pyg_tc: csr_padded_schedules: chunk must be positive");
  TORCH_CHECK(num_edges >= 0 && num_edges < (1ll << 31),
              "pyg_tc: csr_padded_schedules: num_edges must be in [0, 2^31)");
  std::vector<at::Tensor> out;
  if (rowptrs.empty()) return out;
  c10::cuda::CUDAGuard guard(rowptrs[0].device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto opts = rowptrs[0].options().dtype(at::kInt);
  const int64_t q = (num_edges + chunk - 1) / chunk;
  for (const auto& rp_in : rowptrs) {
    TORCH_CHECK(rp_in.is_cuda() && rp_in.scalar_type() == at::kInt && rp_in.dim() == 1 && rp_in.numel() >= 2,
                "pyg_tc: csr_padded_schedules needs int32 CUDA rowptrs of one row at least");
    const auto rp = rp_in.contiguous();
    const int64_t R = rp.numel() - 1, U = R + q, H = q;
    auto n_units = at::empty({R + 1}, opts), n_slots = at::empty({R + 1}, opts), heavy = at::empty({R + 1}, opts);
    auto uoff = at::empty({R + 1}, opts), soff = at::empty({R + 1}, opts), hidx = at::empty({R + 1}, opts);
    schedule_count<<<blocks_for(R + 1), kThreads, 0, stream>>>(rp.data_ptr<int>(), R, (int)chunk,
                                                               n_units.data_ptr<int>(), n_slots.data_ptr<int>(),
                                                               heavy.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    exclusive_sum(n_units.data_ptr<int>(), uoff.data_ptr<int>(), R + 1, rp, stream);
    exclusive_sum(n_slots.data_ptr<int>(), soff.data_ptr<int>(), R + 1, rp, stream);
    exclusive_sum(heavy.data_ptr<int>(), hidx.data_ptr<int>(), R + 1, rp, stream);
    auto tmp = at::empty({U, 4}, opts), units = at::empty({U, 4}, opts);
    auto keys = at::empty({U}, opts), keys_out = at::empty({U}, opts);
    auto ids = at::empty({U}, opts), order = at::empty({U}, opts);
    auto heavy_rows = at::empty({H}, opts), heavy_ptr = at::empty({H + 1}, opts);
    int4* tmp4 = reinterpret_cast<int4*>(tmp.data_ptr<int>());
    unsigned* ukeys = reinterpret_cast<unsigned*>(keys.data_ptr<int>());
    schedule_fillers<<<blocks_for(std::max(U, H)), kThreads, 0, stream>>>(
        rp.data_ptr<int>(), R, (int)chunk, U, H, uoff.data_ptr<int>(), soff.data_ptr<int>(), tmp4, ukeys,
        ids.data_ptr<int>(), heavy_rows.data_ptr<int>(), heavy_ptr.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    schedule_fill<<<blocks_for(R), kThreads, 0, stream>>>(rp.data_ptr<int>(), R, (int)chunk, uoff.data_ptr<int>(),
                                                         soff.data_ptr<int>(), hidx.data_ptr<int>(), tmp4, ukeys,
                                                         ids.data_ptr<int>(), heavy_rows.data_ptr<int>(),
                                                         heavy_ptr.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    sort_pairs(reinterpret_cast<const unsigned*>(ukeys), reinterpret_cast<unsigned*>(keys_out.data_ptr<int>()),
               ids.data_ptr<int>(), order.data_ptr<int>(), U, bits_for(chunk + 1), rp, stream);
    gather_units<<<blocks_for(U), kThreads, 0, stream>>>(tmp4, order.data_ptr<int>(), U,
                                                         reinterpret_cast<int4*>(units.data_ptr<int>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    out.push_back(units);
    out.push_back(heavy_rows);
    out.push_back(heavy_ptr);
  }
  return out;
}

// The per-hop padded layout of a sampled batch's CSR (csr_pad_hops; its
// reference: formats/csr.py's pad_hops_reference). Node block h (n_h real
// rows, from off_h) moves to rows O_h.., edge block h (hop h + 1's e_h edges,
// from base_h) to slots Q_h..; the block offsets travel in the params.
constexpr int kMaxBlocks = 32;  // node blocks: hops + 1

struct PadHopsParams {
  const int* rowptr;
  const int* col;
  int* out_rowptr;
  int* out_col;
  int* out_rows;
  int64_t* node_index;
  int64_t* edge_index;
  bool* node_mask;
  int64_t O[kMaxBlocks + 2], off[kMaxBlocks + 2], Q[kMaxBlocks + 1], base[kMaxBlocks + 1];
  int blocks;  // L + 1
  int64_t R, E, n, e;  // padded rows and slots, real nodes and edges
};

// the block of position i among starts s[0..k] (s[b] <= i < s[b + 1])
__device__ __forceinline__ int block_of(const int64_t* s, int k, int64_t i) {
  int b = 0;
  while (b + 1 < k && i >= s[b + 1]) ++b;
  return b;
}

__device__ __forceinline__ int new_id(const PadHopsParams& p, int64_t v) {
  const int h = block_of(p.off, p.blocks, v);
  return (int)(v - p.off[h] + p.O[h]);
}

// the row of CSR position k: the last row starting at or before it
__device__ __forceinline__ int64_t row_of(const int* __restrict__ rowptr, int64_t rows, int64_t k) {
  int64_t lo = 0, hi = rows;  // rowptr[lo] <= k < rowptr[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (rowptr[mid] <= k) lo = mid;
    else hi = mid;
  }
  return lo;
}

__global__ void pad_hops_kernel(const PadHopsParams p) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int L = p.blocks - 1;
  if (i <= p.R) {  // rowptr: a real row keeps its edges, padded rows start where the block's real edges end
    int64_t v = p.E;
    if (i < p.R) {
      const int h = block_of(p.O, p.blocks, i);
      const int64_t local = i - p.O[h], real = p.off[h + 1] - p.off[h];
      const bool is_real = local < real;
      const int64_t block_edges = h < L ? p.base[h + 1] - p.base[h] : 0;
      v = is_real ? p.rowptr[p.off[h] + local] - p.base[h] + p.Q[h] : p.Q[h] + block_edges;
      p.node_mask[i] = is_real;
    }
    p.out_rowptr[i] = (int)v;
  }
  if (i < p.E) {  // slot i of edge block k: a real edge, or padding from block k + 1's last row to block k's
    const int k = block_of(p.Q, L, i);
    const int64_t local = i - p.Q[k];
    if (local < p.base[k + 1] - p.base[k]) {
      const int64_t j = p.base[k] + local;
      p.out_col[i] = new_id(p, p.col[j]);
      p.out_rows[i] = new_id(p, row_of(p.rowptr, p.n, j));
    } else {
      p.out_col[i] = (int)(p.O[k + 2] - 1);
      p.out_rows[i] = (int)(p.O[k + 1] - 1);
    }
  }
  if (i < p.n) p.node_index[i] = new_id(p, i);
  if (i < p.e) {
    const int k = block_of(p.base, L, i);
    p.edge_index[i] = i - p.base[k] + p.Q[k];
  }
}

std::vector<at::Tensor> csr_pad_hops_cuda(const at::Tensor& rowptr, const at::Tensor& col, c10::IntArrayRef num_nodes,
                                          c10::IntArrayRef num_edges, c10::IntArrayRef pad_nodes,
                                          c10::IntArrayRef pad_edges) {
  const int64_t blocks = (int64_t)num_nodes.size(), L = (int64_t)num_edges.size();
  TORCH_CHECK(blocks == L + 1 && (int64_t)pad_nodes.size() == blocks && (int64_t)pad_edges.size() == L,
              "pyg_tc: csr_pad_hops: one more node count than edge counts, padded and real alike");
  TORCH_CHECK(blocks <= kMaxBlocks, "pyg_tc: csr_pad_hops supports at most " + std::to_string(kMaxBlocks - 1) +
                                        " hops");
  TORCH_CHECK(rowptr.is_cuda() && col.is_cuda() && rowptr.scalar_type() == at::kInt &&
                  col.scalar_type() == at::kInt && rowptr.dim() == 1 && col.dim() == 1,
              "pyg_tc: csr_pad_hops needs an int32 CUDA rowptr and col");
  PadHopsParams p{};
  p.blocks = (int)blocks;
  for (int64_t h = 0; h < blocks; ++h) {
    TORCH_CHECK(num_nodes[h] >= 0 && pad_nodes[h] > num_nodes[h],
                "pyg_tc: csr_pad_hops: every node block needs a padded row (pad_nodes > num_nodes)");
    p.O[h + 1] = p.O[h] + pad_nodes[h];
    p.off[h + 1] = p.off[h] + num_nodes[h];
  }
  for (int64_t h = 0; h < L; ++h) {
    TORCH_CHECK(num_edges[h] >= 0 && pad_edges[h] >= num_edges[h],
                "pyg_tc: csr_pad_hops: pad_edges must be at least num_edges");
    p.Q[h + 1] = p.Q[h] + pad_edges[h];
    p.base[h + 1] = p.base[h] + num_edges[h];
  }
  p.R = p.O[blocks], p.E = p.Q[L], p.n = p.off[blocks], p.e = p.base[L];
  TORCH_CHECK(p.R < INT_MAX && p.E < INT_MAX, "pyg_tc: csr_pad_hops: more than 2^31 - 1 rows or slots");
  TORCH_CHECK(rowptr.numel() == p.n + 1 && col.numel() == p.e,
              "pyg_tc: csr_pad_hops: rowptr must have one entry more than the real nodes, col one per real edge");
  c10::cuda::CUDAGuard guard(rowptr.device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto rp = rowptr.contiguous(), cl = col.contiguous();
  const auto i32 = rp.options(), i64 = rp.options().dtype(at::kLong);
  auto out_rowptr = at::empty({p.R + 1}, i32), out_col = at::empty({p.E}, i32), out_rows = at::empty({p.E}, i32);
  auto node_index = at::empty({p.n}, i64), edge_index = at::empty({p.e}, i64);
  auto node_mask = at::empty({p.R}, rp.options().dtype(at::kBool));
  p.rowptr = rp.data_ptr<int>();
  p.col = cl.data_ptr<int>();
  p.out_rowptr = out_rowptr.data_ptr<int>();
  p.out_col = out_col.data_ptr<int>();
  p.out_rows = out_rows.data_ptr<int>();
  p.node_index = node_index.data_ptr<int64_t>();
  p.edge_index = edge_index.data_ptr<int64_t>();
  p.node_mask = node_mask.data_ptr<bool>();
  const int64_t n = std::max(std::max(p.R + 1, p.E), std::max(p.n, p.e));
  pad_hops_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out_rowptr, out_col, out_rows, node_index, edge_index, node_mask};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("csr_transpose", &csr_transpose_cuda);
  m.impl("csr_schedules", &csr_schedules_cuda);
  m.impl("csr_padded_schedules", &csr_padded_schedules_cuda);
  m.impl("csr_pad_hops", &csr_pad_hops_cuda);
}

}  // namespace pyg_tc

// The GPU half of the CSR format builders (pyg_tc/formats/csr.py, which also
// defines the ops beside their references), the same tensors bit for bit:
//
//   csr_transpose(col, rows, num_cols) -> (t_rowptr, t_col, t_perm):
//     a stable radix sort of the sources (cub, over the bits of num_cols),
//     then one kernel writes t_rowptr from the sorted keys' boundaries and
//     gathers t_col; no synchronisation.
//   csr_schedules(rowptrs, chunk) -> [units, heavy_rows, heavy_ptr]... + [slots]:
//     the degree-bucket schedule of each rowptr: one exclusive scan of each
//     row's (units = ceil(deg / chunk), at least one; heavy slots; heavy
//     flag), read from rowptr by the scan's input iterator, one
//     synchronisation for the sizes of all of them, one kernel writing the
//     units in row order, a stable radix sort by length (longest first), one
//     gather; a call's temporaries in one allocation (per synchronisation).
//   csr_padded_schedules(rowptrs, chunk, num_edges) -> [units, heavy_rows, heavy_ptr]...:
//     the same schedules with array sizes fixed by (rows, num_edges, chunk)
//     and filler entries (formats/csr.py's padded_schedule, its reference):
//     the same kernels, one more writing the fillers, no synchronisation, so
//     it runs inside a CUDA graph capture.
//   csr_pad_hops(rowptr, col, num_nodes, num_edges, pad_nodes, pad_edges)
//     -> [rowptr, col, rows, node_index, edge_index, node_mask]: a sampled
//     batch's CSR padded hop by hop (formats/csr.py's pad_hops_reference),
//     one launch (the block offsets in its params), no synchronisation.
// A format build is about 12 launches and one synchronisation.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

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

// One allocation for a call's temporaries: pieces carved from one byte
// buffer, each 256-byte aligned. A first pass with no buffer (take() gives
// nullptr) counts the bytes; cub's size queries take those null pointers.
class Workspace {
 public:
  template <typename T>
  T* take(int64_t n) {
    const size_t at = used_;
    used_ += (static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(T) + 255) / 256 * 256;
    return base_ ? reinterpret_cast<T*>(base_ + at) : nullptr;
  }
  void* take_bytes(size_t n) { return take<char>((int64_t)n); }
  // the buffer for what the counting pass took, on like's device; the next pass carves it
  at::Tensor allocate(const at::Tensor& like) {
    buffer_ = at::empty({(int64_t)std::max<size_t>(used_, 1)}, like.options().dtype(at::kByte));
    base_ = reinterpret_cast<char*>(buffer_.data_ptr());
    used_ = 0;
    return buffer_;
  }

 private:
  at::Tensor buffer_;
  char* base_ = nullptr;
  size_t used_ = 0;
};

template <typename K, typename V>
size_t sort_pairs_bytes(int64_t n, int end_bit, cudaStream_t stream) {
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const K*)nullptr, (K*)nullptr, (const V*)nullptr,
                                                 (V*)nullptr, (int)n, 0, end_bit, stream));
  return bytes;
}

template <typename K, typename V>
void sort_pairs(const K* kin, K* kout, const V* vin, V* vout, int64_t n, int end_bit, void* temp, size_t bytes,
                cudaStream_t stream) {
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, bytes, kin, kout, vin, vout, (int)n, 0, end_bit, stream));
}

__global__ void iota(int* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = (int)i;
}

// t_col[i] = rows[t_perm[i]].
__global__ void transpose_cols(const int* __restrict__ perm, const int* __restrict__ rows, int64_t E,
                               int* __restrict__ t_col) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < E) t_col[i] = rows[perm[i]];
}

// t_rowptr[v] = first position of a key >= v in the sorted keys (E past the
// last), v = 0..C: a thread per column and a binary search, so a long run of
// columns without edges (a batch's sources that an edge type does not read)
// is not one thread's serial loop.
__global__ void rowptr_from_keys(const unsigned* __restrict__ keys, int64_t E, int64_t C,
                                 int* __restrict__ t_rowptr) {
  const int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (v > C) return;
  int64_t lo = 0, hi = E;
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if ((int64_t)keys[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  t_rowptr[v] = (int)lo;
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
  auto t_perm = at::empty({E}, opts);
  auto t_rowptr = at::empty({C + 1}, opts);
  auto t_col = at::empty({E}, opts);
  const int bits = bits_for(C);
  const size_t sort_bytes = E > 0 ? sort_pairs_bytes<unsigned, int>(E, bits, stream) : 0;
  Workspace ws;
  for (int pass = 0; pass < 2; ++pass) {
    unsigned* keys = ws.take<unsigned>(E);
    int* ids = ws.take<int>(E);
    void* temp = ws.take_bytes(sort_bytes);
    if (pass == 0) {
      ws.allocate(c);
      continue;
    }
    if (E > 0) {
      iota<<<blocks_for(E), kThreads, 0, stream>>>(ids, E);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      sort_pairs(reinterpret_cast<const unsigned*>(c.data_ptr<int>()), keys, (const int*)ids, t_perm.data_ptr<int>(),
                 E, bits, temp, sort_bytes, stream);
    }
    rowptr_from_keys<<<blocks_for(C + 1), kThreads, 0, stream>>>(keys, E, C, t_rowptr.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (E > 0) {
      transpose_cols<<<blocks_for(E), kThreads, 0, stream>>>(t_perm.data_ptr<int>(), r.data_ptr<int>(), E,
                                                             t_col.data_ptr<int>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
  return {t_rowptr, t_col, t_perm};
}

// Row v < R of a schedule: (its unit count n = ceil(deg / chunk), at least
// 1; n again when heavy (n > 1) else 0; the heavy flag; 0); entry R is 0,
// so one exclusive scan of them gives every row's (first unit, first heavy
// slot, heavy index) and, at R, the totals.
struct RowCounts {
  const int* rowptr;
  int64_t R;
  int chunk;
  __host__ __device__ int4 operator()(int64_t v) const {
    if (v >= R) return make_int4(0, 0, 0, 0);
    const int d = rowptr[v + 1] - rowptr[v];
    const int n = d > chunk ? (d + chunk - 1) / chunk : 1;
    return make_int4(n, n > 1 ? n : 0, n > 1, 0);
  }
};

struct AddInt4 {
  __host__ __device__ int4 operator()(const int4& a, const int4& b) const {
    return make_int4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
  }
};

using RowCountIt = thrust::transform_iterator<RowCounts, thrust::counting_iterator<int64_t>>;

inline RowCountIt row_counts(const int* rowptr, int64_t R, int chunk) {
  return RowCountIt(thrust::counting_iterator<int64_t>(0), RowCounts{rowptr, R, chunk});
}

// offs[v] = (first unit, first heavy slot, heavy index, 0) of row v <= R: one scan, no count kernel
size_t schedule_scan_bytes(int64_t R, cudaStream_t stream) {
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveScan(nullptr, bytes, row_counts(nullptr, R, 1), (int4*)nullptr, AddInt4{},
                                                make_int4(0, 0, 0, 0), (int)(R + 1), stream));
  return bytes;
}

void schedule_scan(const int* rowptr, int64_t R, int chunk, int4* offs, void* temp, size_t bytes,
                   cudaStream_t stream) {
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveScan(temp, bytes, row_counts(rowptr, R, chunk), offs, AddInt4{},
                                                make_int4(0, 0, 0, 0), (int)(R + 1), stream));
}

__global__ void schedule_fill(const int* __restrict__ rowptr, int64_t R, int chunk, const int4* __restrict__ offs,
                              int4* __restrict__ units, unsigned* __restrict__ keys, int* __restrict__ ids,
                              int* __restrict__ heavy_rows, int* __restrict__ heavy_ptr) {
  const int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (v == 0) heavy_ptr[0] = 0;
  if (v >= R) return;
  const int4 o = offs[v];
  const int n = offs[v + 1].x - o.x, end_row = rowptr[v + 1];
  const bool is_heavy = n > 1;
  for (int k = 0; k < n; ++k) {
    const int u = o.x + k;
    const int start = rowptr[v] + k * chunk;
    const int end = min(start + chunk, end_row);
    units[u] = make_int4((int)v, start, end, is_heavy ? o.y + k : -1);
    keys[u] = (unsigned)(chunk - (end - start));  // ascending key = longest first
    ids[u] = u;
  }
  if (is_heavy) {
    heavy_rows[o.z] = (int)v;
    heavy_ptr[o.z + 1] = o.y + n;
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
                                 const int4* __restrict__ offs, int4* __restrict__ units, unsigned* __restrict__ keys,
                                 int* __restrict__ ids, int* __restrict__ heavy_rows, int* __restrict__ heavy_ptr) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int real_units = offs[R].x, real_slots = offs[R].y, E = rowptr[R];
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

// The units of a schedule sorted longest first (stable): the sort's
// temporaries and the units in row order from ws, the result in units.
struct UnitSort {
  int4* tmp;
  unsigned *keys, *keys_out;
  int *ids, *order;
  void* temp;
  size_t bytes;
  UnitSort(Workspace& ws, int64_t U, size_t sort_bytes)
      : tmp(ws.take<int4>(U)),
        keys(ws.take<unsigned>(U)),
        keys_out(ws.take<unsigned>(U)),
        ids(ws.take<int>(U)),
        order(ws.take<int>(U)),
        temp(ws.take_bytes(sort_bytes)),
        bytes(sort_bytes) {}
  void run(int64_t U, int chunk, int4* units, cudaStream_t stream) const {
    if (U == 0) return;
    sort_pairs((const unsigned*)keys, keys_out, (const int*)ids, order, U, bits_for(chunk + 1), temp, bytes, stream);
    gather_units<<<blocks_for(U), kThreads, 0, stream>>>(tmp, order, U, units);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

std::vector<at::Tensor> csr_schedules_cuda(at::TensorList rowptrs, int64_t chunk) {
  TORCH_CHECK(chunk >= 1 && chunk < (1 << 30), "pyg_tc: csr_schedules: chunk must be positive");
  const int64_t M = (int64_t)rowptrs.size();
  std::vector<at::Tensor> out;
  if (M == 0) return {at::empty({0}, at::TensorOptions().dtype(at::kLong))};
  c10::cuda::CUDAGuard guard(rowptrs[0].device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto opts = rowptrs[0].options().dtype(at::kInt);
  std::vector<at::Tensor> rps;
  std::vector<int4*> offs(M);
  std::vector<size_t> scan_bytes(M);
  for (int64_t m = 0; m < M; ++m) {
    const auto& rp = rowptrs[m];
    TORCH_CHECK(rp.is_cuda() && rp.scalar_type() == at::kInt && rp.dim() == 1 && rp.numel() >= 1,
                "pyg_tc: csr_schedules needs int32 CUDA rowptrs");
    rps.push_back(rp.contiguous());
    scan_bytes[m] = schedule_scan_bytes(rp.numel() - 1, stream);
  }
  // every schedule's offsets, then (after the one synchronisation) its sort's temporaries
  Workspace ws;
  int* sizes_dev = nullptr;
  for (int pass = 0; pass < 2; ++pass) {
    sizes_dev = ws.take<int>(3 * M);
    std::vector<void*> temps(M);
    for (int64_t m = 0; m < M; ++m) {
      offs[m] = ws.take<int4>(rps[m].numel());
      temps[m] = ws.take_bytes(scan_bytes[m]);
    }
    if (pass == 0) {
      ws.allocate(rps[0]);
      continue;
    }
    for (int64_t m = 0; m < M; ++m) {
      const int64_t R = rps[m].numel() - 1;
      schedule_scan(rps[m].data_ptr<int>(), R, (int)chunk, offs[m], temps[m], scan_bytes[m], stream);
      C10_CUDA_CHECK(cudaMemcpyAsync(sizes_dev + 3 * m, offs[m] + R, 3 * sizeof(int), cudaMemcpyDeviceToDevice, stream));
    }
  }
  // The one synchronisation: units, slots and heavy rows of every schedule.
  auto sizes = at::empty({3 * M}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  C10_CUDA_CHECK(cudaMemcpyAsync(sizes.data_ptr<int>(), sizes_dev, 3 * M * sizeof(int), cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int* sz = sizes.data_ptr<int>();
  auto slots = at::empty({M}, at::TensorOptions().dtype(at::kLong));
  std::vector<size_t> sort_bytes(M);
  for (int64_t m = 0; m < M; ++m) sort_bytes[m] = sort_pairs_bytes<unsigned, int>(sz[3 * m], bits_for(chunk + 1), stream);
  Workspace ws2;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<UnitSort> sorts;
    for (int64_t m = 0; m < M; ++m) sorts.emplace_back(ws2, sz[3 * m], sort_bytes[m]);
    if (pass == 0) {
      ws2.allocate(rps[0]);
      continue;
    }
    for (int64_t m = 0; m < M; ++m) {
      const int64_t R = rps[m].numel() - 1, U = sz[3 * m], S = sz[3 * m + 1], H = sz[3 * m + 2];
      auto units = at::empty({U, 4}, opts), heavy_rows = at::empty({H}, opts), heavy_ptr = at::empty({H + 1}, opts);
      const UnitSort& us = sorts[m];
      schedule_fill<<<blocks_for(R), kThreads, 0, stream>>>(rps[m].data_ptr<int>(), R, (int)chunk, offs[m], us.tmp,
                                                           us.keys, us.ids, heavy_rows.data_ptr<int>(),
                                                           heavy_ptr.data_ptr<int>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      us.run(U, (int)chunk, reinterpret_cast<int4*>(units.data_ptr<int>()), stream);
      out.push_back(units);
      out.push_back(heavy_rows);
      out.push_back(heavy_ptr);
      slots.data_ptr<int64_t>()[m] = S;
    }
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
  const int64_t q = (num_edges + chunk - 1) / chunk, H = q, M = (int64_t)rowptrs.size();
  std::vector<at::Tensor> rps;
  std::vector<size_t> scan_bytes(M), sort_bytes(M);
  for (const auto& rp_in : rowptrs) {
    TORCH_CHECK(rp_in.is_cuda() && rp_in.scalar_type() == at::kInt && rp_in.dim() == 1 && rp_in.numel() >= 2,
                "pyg_tc: csr_padded_schedules needs int32 CUDA rowptrs of one row at least");
    rps.push_back(rp_in.contiguous());
    const int64_t R = rps.back().numel() - 1;
    scan_bytes[rps.size() - 1] = schedule_scan_bytes(R, stream);
    sort_bytes[rps.size() - 1] = sort_pairs_bytes<unsigned, int>(R + q, bits_for(chunk + 1), stream);
  }
  // one allocation for every schedule's temporaries (their sizes are fixed by R, num_edges and chunk)
  Workspace ws;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int4*> offs;
    std::vector<void*> scan_temps;
    std::vector<UnitSort> sorts;
    for (int64_t m = 0; m < M; ++m) {
      const int64_t R = rps[m].numel() - 1;
      offs.push_back(ws.take<int4>(R + 1));
      scan_temps.push_back(ws.take_bytes(scan_bytes[m]));
      sorts.emplace_back(ws, R + q, sort_bytes[m]);
    }
    if (pass == 0) {
      ws.allocate(rps[0]);
      continue;
    }
    for (int64_t m = 0; m < M; ++m) {
      const int* rp = rps[m].data_ptr<int>();
      const int64_t R = rps[m].numel() - 1, U = R + q;
      auto units = at::empty({U, 4}, opts), heavy_rows = at::empty({H}, opts), heavy_ptr = at::empty({H + 1}, opts);
      const UnitSort& us = sorts[m];
      schedule_scan(rp, R, (int)chunk, offs[m], scan_temps[m], scan_bytes[m], stream);
      schedule_fillers<<<blocks_for(std::max(U, H)), kThreads, 0, stream>>>(
          rp, R, (int)chunk, U, H, offs[m], us.tmp, us.keys, us.ids, heavy_rows.data_ptr<int>(),
          heavy_ptr.data_ptr<int>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      schedule_fill<<<blocks_for(R), kThreads, 0, stream>>>(rp, R, (int)chunk, offs[m], us.tmp, us.keys, us.ids,
                                                           heavy_rows.data_ptr<int>(), heavy_ptr.data_ptr<int>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      us.run(U, (int)chunk, reinterpret_cast<int4*>(units.data_ptr<int>()), stream);
      out.push_back(units);
      out.push_back(heavy_rows);
      out.push_back(heavy_ptr);
    }
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

// Neighbour sampling of a mini-batch on the GPU (the op neighbor_sample; its
// specification and CPU reference: pyg_tc/ops/neighbor.py), bit for bit the
// reference's batch: same nodes in the same order, same edges, same CSR.
//
// The graph (CSC: colptr int64 [N+1], row int32 [E]) lives on the GPU or in
// pinned host memory, read in place over UVA. Two int32 arrays of the graph's
// node count are the sampler's state between calls: node_map (global id ->
// local id, -1 when not in the batch) and first (the first position of a
// candidate in a hop, INT_MAX when unused); every call leaves them as it
// found them. No hash table and no sort: a hop is
//
//   count     per target: how many edges it takes (min(k, degree), ...)
//   scan      exclusive sum -> each target's first edge (cub)
//   sample    per target: Floyd's k distinct positions (sorted) or k draws
//             with replacement, Philox 4x32-10 keyed by the call's seed; the
//             edges' CSC ids, sources and CSR rows are written, and each
//             source not in the batch yet bids its position (atomicMin)
//   flag      an edge is a new node's first appearance: source not in the
//             batch and the winning bid is its own position
//   scan      exclusive sum of the flags -> the new nodes' local ids, in order
//             of first appearance (cub)
//   assign    new nodes get their ids (node_map, nodes); bids are cleared
//   relabel   each edge's source as a local id
//
// Sizes stay on the device: every launch is sized by a bound known on the
// host (seeds x fan-outs, capped at the graph's node count) and reads the
// true counts from device memory, so a call synchronises once, at the end, to
// read the counts (and once more per hop of fan-out -1, whose bound is the
// sum of degrees). Everything written is bounded by the fan-outs: no
// workspace of the graph's size besides the two state arrays.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cub/device/device_scan.cuh>

#include <climits>
#include <tuple>
#include <vector>

#include "common/philox.cuh"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) { return (unsigned)((n + kThreads - 1) / kThreads + (n == 0)); }

// min(floor(u * n), n - 1) of a 53-bit uniform u from Philox words (w.x, w.y):
// the reference's draw_index (rel: the edge type's number, 0 when homogeneous).
__device__ __forceinline__ int64_t draw(uint32_t r, uint32_t hop, uint32_t i, uint64_t seed, int64_t n,
                                        uint32_t rel = 0u) {
  const uint4 w = philox4x32(r, hop, i, rel, (uint32_t)seed, (uint32_t)(seed >> 32));
  const double u = ((double)(w.x >> 5) * 67108864.0 + (double)(w.y >> 6)) * (1.0 / 9007199254740992.0);
  const int64_t t = (int64_t)floor(u * (double)n);
  return t < n - 1 ? t : n - 1;
}

// Device counters of one call: for hop h, node_base[h] (first local id of the
// hop's targets), count[h] (how many), edge_base[h] (first edge); count[H]
// is the last hop's new nodes.
struct Counters {
  int64_t* node_base;  // [H + 1]
  int64_t* count;      // [H + 1]
  int64_t* edge_base;  // [H + 1]
};

__global__ void seed_bid(const int64_t* __restrict__ seeds, int64_t B, int* __restrict__ first,
                         int64_t* __restrict__ nodes) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= B) return;
  nodes[i] = seeds[i];
  atomicMin(first + seeds[i], (int)i);
}

// A repeated seed keeps its place and refers to its first occurrence.
__global__ void seed_map(const int64_t* __restrict__ seeds, int64_t B, int* __restrict__ first,
                         int* __restrict__ node_map, Counters c) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i == 0) {
    c.node_base[0] = 0;
    c.count[0] = B;
    c.edge_base[0] = 0;
  }
  if (i >= B) return;
  const int64_t g = seeds[i];
  if (first[g] == (int)i) {
    node_map[g] = (int)i;
    first[g] = INT_MAX;
  }
}

__global__ void count_edges(const int64_t* __restrict__ colptr, const int64_t* __restrict__ nodes,
                            Counters c, int hop, int64_t bound, int k, bool replace,
                            int64_t* __restrict__ cnt) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r > bound) return;
  int64_t n = 0;
  if (r < c.count[hop]) {
    const int64_t g = nodes[c.node_base[hop] + r];
    const int64_t d = colptr[g + 1] - colptr[g];
    n = k < 0 ? d : replace ? (d > 0 ? k : 0) : (d < k ? d : k);
  }
  cnt[r] = n;  // cnt[bound] = 0: the exclusive scan's last entry is the total
}

// The n sampled positions (within its CSC row of degree d) of the target at
// position r of a hop: every edge in CSC order, n independent draws
// (replace), or Floyd's n distinct draws sorted (insertion sort: n is a
// fan-out). rel: the edge type's number (0 when homogeneous).
__device__ __forceinline__ void sample_positions(int64_t* pos, int64_t n, int64_t d, int k, bool replace, uint32_t r,
                                                 uint32_t hop, uint32_t rel, uint64_t seed) {
  if (n == d && (k < 0 || !replace)) {  // every edge, in CSC order
    for (int64_t i = 0; i < n; ++i) pos[i] = i;
  } else if (replace) {  // n independent draws, in draw order
    for (int64_t i = 0; i < n; ++i) pos[i] = draw(r, hop, (uint32_t)i, seed, d, rel);
  } else {  // Floyd
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = d - n + i;
      int64_t t = draw(r, hop, (uint32_t)i, seed, j + 1, rel);
      for (int64_t q = 0; q < i; ++q)
        if (pos[q] == t) {
          t = j;
          break;
        }
      int64_t q = i;
      for (; q > 0 && pos[q - 1] > t; --q) pos[q] = pos[q - 1];
      pos[q] = t;
    }
  }
}

__global__ void sample_edges(const int64_t* __restrict__ colptr, const int* __restrict__ row,
                             const int64_t* __restrict__ nodes, const int64_t* __restrict__ off,
                             Counters c, int hop, int k, bool replace, uint64_t seed,
                             const int* __restrict__ node_map, int* __restrict__ first,
                             int64_t* __restrict__ eid, int* __restrict__ cand, int* __restrict__ dst,
                             int* __restrict__ rowptr) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= c.count[hop]) return;
  const int64_t v = c.node_base[hop] + r;  // the target's local id
  const int64_t g = nodes[v];
  const int64_t start = colptr[g], d = colptr[g + 1] - start;
  const int64_t o = off[r], n = off[r + 1] - o;
  const int64_t e0 = c.edge_base[hop] + o;  // first edge of this target in the batch
  rowptr[v] = (int)e0;
  int64_t* pos = eid + e0;
  sample_positions(pos, n, d, k, replace, (uint32_t)r, (uint32_t)hop, 0u, seed);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = start + pos[i];
    pos[i] = e;
    const int s = row[e];
    cand[o + i] = s;
    dst[e0 + i] = (int)v;
    if (node_map[s] < 0) atomicMin(first + s, (int)(o + i));
  }
}

// flag[i] (i <= Eb): edge i of the hop is its source's first appearance and
// the source is not in the batch yet.
__global__ void flag_new(const int* __restrict__ cand, const int64_t* __restrict__ off, int64_t Fb, int64_t Eb,
                         const int* __restrict__ node_map, const int* __restrict__ first, int* __restrict__ flag) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i > Eb) return;
  int f = 0;
  if (i < off[Fb]) {
    const int s = cand[i];
    f = node_map[s] < 0 && first[s] == (int)i;
  }
  flag[i] = f;
}

// Edge i of a hop, when it is its source's first appearance (flag), gives
// the source its local id base + ids[i]; its bid is cleared.
__device__ __forceinline__ void add_new_node(int64_t i, int64_t Eb, const int* cand, const int* flag, const int* ids,
                                             int64_t base, int* node_map, int* first, int64_t* nodes) {
  if (i >= Eb || !flag[i]) return;
  const int s = cand[i];
  const int64_t v = base + ids[i];
  node_map[s] = (int)v;
  nodes[v] = s;
  first[s] = INT_MAX;
}

__global__ void assign_new(const int* __restrict__ cand, const int* __restrict__ flag, const int* __restrict__ ids,
                           const int64_t* __restrict__ off, int64_t Fb, int64_t Eb, Counters c, int hop,
                           int* __restrict__ node_map, int* __restrict__ first, int64_t* __restrict__ nodes) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t base = c.node_base[hop] + c.count[hop];
  if (i == 0) {  // (the other threads read only hop's entries)
    c.node_base[hop + 1] = base;
    c.count[hop + 1] = ids[Eb];
    c.edge_base[hop + 1] = c.edge_base[hop] + off[Fb];
  }
  add_new_node(i, Eb, cand, flag, ids, base, node_map, first, nodes);
}

__global__ void relabel(const int* __restrict__ cand, const int64_t* __restrict__ off, int64_t Fb, Counters c,
                        int hop, const int* __restrict__ node_map, int* __restrict__ col) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= off[Fb]) return;
  col[c.edge_base[hop] + i] = node_map[cand[i]];
}

// Rows of the last hop's nodes (no edges) and rowptr's end; the counts as
// [nodes per hop..., edges per hop...].
__global__ void finish(Counters c, int H, int64_t bound, int* __restrict__ rowptr,
                       int64_t* __restrict__ counts) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t begin = c.node_base[H], end = begin + c.count[H];
  if (i == 0) {
    for (int h = 0; h <= H; ++h) counts[h] = c.count[h];
    for (int h = 0; h < H; ++h) counts[H + 1 + h] = c.edge_base[h + 1] - c.edge_base[h];
  }
  if (i > bound || begin + i > end) return;
  rowptr[begin + i] = (int)c.edge_base[H];
}

__global__ void reset_map(const int64_t* __restrict__ nodes, const Counters c, int H, int64_t bound,
                          int* __restrict__ node_map) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= bound || i >= c.node_base[H] + c.count[H]) return;
  node_map[nodes[i]] = -1;
}

__global__ void edge_index_kernel(const int* __restrict__ col, const int* __restrict__ dst, int64_t E,
                                  int64_t* __restrict__ ei) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= E) return;
  ei[i] = col[i];
  ei[E + i] = dst[i];
}

void exclusive_sum(const int64_t* in, int64_t* out, int64_t n, const at::Tensor& like, cudaStream_t stream) {
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, stream));
  auto temp = at::empty({(int64_t)bytes}, like.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data_ptr(), bytes, in, out, n, stream));
}

void exclusive_sum(const int* in, int* out, int64_t n, const at::Tensor& like, cudaStream_t stream) {
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, stream));
  auto temp = at::empty({(int64_t)bytes}, like.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data_ptr(), bytes, in, out, n, stream));
}

int64_t read_scalar(const int64_t* p, cudaStream_t stream) {
  int64_t v = 0;
  C10_CUDA_CHECK(cudaMemcpyAsync(&v, p, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

void check_graph_array(const at::Tensor& t, at::ScalarType dtype, const char* name) {
  TORCH_CHECK(t.dim() == 1 && t.scalar_type() == dtype && t.is_contiguous(), "pyg_tc: neighbor_sample: ",
              name, " must be a contiguous 1-D ", c10::toString(dtype), " tensor");
  TORCH_CHECK(t.is_cuda() || t.is_pinned(), "pyg_tc: neighbor_sample: ", name,
              " must be on the GPU or in pinned host memory");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> neighbor_sample_cuda(
    const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& seeds, c10::IntArrayRef fanouts,
    bool replace, int64_t seed, at::Tensor& node_map, at::Tensor& first) {
  check_graph_array(colptr, at::kLong, "colptr");
  check_graph_array(row, at::kInt, "row");
  TORCH_CHECK(seeds.is_cuda() && seeds.scalar_type() == at::kLong && seeds.dim() == 1,
              "pyg_tc: neighbor_sample: seeds must be a 1-D int64 CUDA tensor");
  const int64_t N = colptr.numel() - 1;
  TORCH_CHECK(node_map.is_cuda() && first.is_cuda() && node_map.scalar_type() == at::kInt &&
                  first.scalar_type() == at::kInt && node_map.numel() == N && first.numel() == N,
              "pyg_tc: neighbor_sample: node_map and first must be int32 CUDA tensors of the node count");
  TORCH_CHECK(N < INT_MAX, "pyg_tc: neighbor_sample supports fewer than 2^31 - 1 nodes");
  c10::cuda::CUDAGuard guard(seeds.device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto sd = seeds.contiguous();
  const int64_t B = sd.numel(), H = (int64_t)fanouts.size();
  const auto opts = sd.options();

  // Bounds per hop: F[h] targets, E[h] edges (k < 0: read after the count's scan).
  std::vector<int64_t> F(H + 1), E(H, 0);
  F[0] = B;
  int64_t node_bound = B, max_F = B;
  for (int64_t h = 0; h < H; ++h) {
    TORCH_CHECK(fanouts[h] >= -1, "pyg_tc: neighbor_sample: fan-outs must be >= -1");
    if (fanouts[h] >= 0) E[h] = F[h] * fanouts[h];
    else E[h] = -1;
    F[h + 1] = E[h] < 0 ? N : std::min<int64_t>(E[h], N);
    node_bound += F[h + 1];
    max_F = std::max(max_F, F[h + 1]);
  }
  node_bound = std::min<int64_t>(node_bound, N + B);  // a repeated seed is a node of its own

  auto counters = at::empty({3 * (H + 1)}, opts);
  Counters c{counters.data_ptr<int64_t>(), counters.data_ptr<int64_t>() + (H + 1),
             counters.data_ptr<int64_t>() + 2 * (H + 1)};
  auto nodes = at::empty({node_bound}, opts);
  auto rowptr = at::empty({node_bound + 1}, opts.dtype(at::kInt));
  auto cnt = at::empty({max_F + 1}, opts);
  auto off = at::empty({max_F + 1}, opts);
  int* nm = node_map.data_ptr<int>();
  int* fi = first.data_ptr<int>();
  const int64_t* cp = colptr.data_ptr<int64_t>();
  const int* rw = row.data_ptr<int>();

  if (B > 0) {
    seed_bid<<<blocks_for(B), kThreads, 0, stream>>>(sd.data_ptr<int64_t>(), B, fi, nodes.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  seed_map<<<blocks_for(B), kThreads, 0, stream>>>(sd.data_ptr<int64_t>(), B, fi, nm, c);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // Edge arrays of the batch: hop h writes at edge_base[h] (on the device), so
  // one buffer of the summed bounds holds every hop contiguously; a hop of
  // fan-out -1 learns its bound after its count and grows the buffers.
  // (E[h] < 0 counts 0 until the hop has learned its bound)
  auto edge_bound = [&]() {
    int64_t total = 0;
    for (int64_t h = 0; h < H; ++h) total += std::max<int64_t>(E[h], 0);
    return total;
  };
  int64_t max_E = 0;
  for (int64_t h = 0; h < H; ++h) max_E = std::max(max_E, E[h]);
  auto eid = at::empty({edge_bound()}, opts);
  auto col = at::empty({edge_bound()}, opts.dtype(at::kInt));
  auto dst = at::empty({edge_bound()}, opts.dtype(at::kInt));
  auto cand = at::empty({max_E}, opts.dtype(at::kInt));
  auto flag = at::empty({max_E + 1}, opts.dtype(at::kInt));
  auto ids = at::empty({max_E + 1}, opts.dtype(at::kInt));
  auto grow = [&](at::Tensor& t, int64_t n) {
    if (t.numel() >= n) return;
    auto bigger = at::empty({n}, t.options());
    bigger.narrow(0, 0, t.numel()).copy_(t);
    t = bigger;
  };
  int64_t done = 0;  // summed bounds of the hops so far
  for (int64_t h = 0; h < H; ++h) {
    const int k = (int)fanouts[h];
    const int hop = (int)h;
    count_edges<<<blocks_for(F[h] + 1), kThreads, 0, stream>>>(cp, nodes.data_ptr<int64_t>(), c, hop, F[h], k,
                                                               replace, cnt.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t* of = off.data_ptr<int64_t>();
    exclusive_sum(cnt.data_ptr<int64_t>(), off.data_ptr<int64_t>(), F[h] + 1, sd, stream);
    if (E[h] < 0) {  // all neighbours: the bound is the sum of degrees (one synchronisation)
      E[h] = read_scalar(of + F[h], stream);
      const int64_t total = edge_bound();  // this hop's edges and the later hops' bounds
      grow(eid, total);
      grow(col, total);
      grow(dst, total);
      grow(cand, E[h]);
      grow(flag, E[h] + 1);
      grow(ids, E[h] + 1);
    }
    TORCH_CHECK(done + E[h] < INT_MAX, "pyg_tc: neighbor_sample: a batch may hold fewer than 2^31 - 1 edges");
    TORCH_CHECK(eid.numel() >= done + E[h], "pyg_tc: neighbor_sample: internal error (edge buffer)");
    sample_edges<<<blocks_for(F[h]), kThreads, 0, stream>>>(
        cp, rw, nodes.data_ptr<int64_t>(), of, c, hop, k, replace, (uint64_t)seed, nm, fi, eid.data_ptr<int64_t>(),
        cand.data_ptr<int>(), dst.data_ptr<int>(), rowptr.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    flag_new<<<blocks_for(E[h] + 1), kThreads, 0, stream>>>(cand.data_ptr<int>(), of, F[h], E[h], nm, fi,
                                                            flag.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    exclusive_sum(flag.data_ptr<int>(), ids.data_ptr<int>(), E[h] + 1, sd, stream);
    assign_new<<<blocks_for(E[h]), kThreads, 0, stream>>>(cand.data_ptr<int>(), flag.data_ptr<int>(),
                                                          ids.data_ptr<int>(), of, F[h], E[h], c, hop, nm, fi,
                                                          nodes.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    relabel<<<blocks_for(E[h]), kThreads, 0, stream>>>(cand.data_ptr<int>(), of, F[h], c, hop, nm,
                                                       col.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    done += E[h];
  }
  auto counts_dev = at::empty({2 * H + 1}, opts);
  finish<<<blocks_for(F[H] + 1), kThreads, 0, stream>>>(c, (int)H, F[H], rowptr.data_ptr<int>(),
                                                        counts_dev.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  reset_map<<<blocks_for(node_bound), kThreads, 0, stream>>>(nodes.data_ptr<int64_t>(), c, (int)H, node_bound, nm);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // The one synchronisation of a call without fan-out -1: the counts.
  auto counts = at::empty({2 * H + 1}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  C10_CUDA_CHECK(cudaMemcpyAsync(counts.data_ptr<int64_t>(), counts_dev.data_ptr<int64_t>(),
                                 (2 * H + 1) * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int64_t* ct = counts.data_ptr<int64_t>();
  int64_t n = 0, e = 0;
  for (int64_t h = 0; h <= H; ++h) n += ct[h];
  for (int64_t h = 0; h < H; ++h) e += ct[H + 1 + h];
  auto edge_index = at::empty({2, e}, opts);
  if (e > 0) {
    edge_index_kernel<<<blocks_for(e), kThreads, 0, stream>>>(col.data_ptr<int>(), dst.data_ptr<int>(), e,
                                                              edge_index.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {nodes.narrow(0, 0, n), edge_index, rowptr.narrow(0, 0, n + 1), col.narrow(0, 0, e),
          eid.narrow(0, 0, e), counts.clone()};
}

// ---------------------------------------------------------------- heterogeneous graphs
//
// hetero_neighbor_sample (specification and reference: pyg_tc/ops/hetero_neighbor.py):
// the homogeneous hop once per (hop, edge type) step, in order, each with
// the node map and bids of its source type. Node counts live on the device
// in rows of T entries (one per node type): row 0 zeros, row 1 the seeds,
// row 2 + s the counts after step s = h * R + e. Hop h's targets of type t
// are rows [h ? 1 + (h - 1) R : 0, 1 + h R) of t's node list: the nodes the
// previous hop added (the seeds for h = 0). Per edge type, ebase[e][h] is
// the first edge of hop h in its arrays.
struct HStep {
  const int64_t* tgt_begin;  // the targets' first local id (dst type)
  const int64_t* tgt_end;    // one past their last
  const int64_t* src_now;    // row 1 + s: node counts before the step
  int64_t* src_next;         // row 2 + s: after it
  const int64_t* edge_begin;  // ebase[e][h]
  int64_t* edge_next;         // ebase[e][h + 1]
};

__global__ void h_seed_map(const int64_t* __restrict__ seeds, int64_t B, int* __restrict__ first,
                           int* __restrict__ node_map, int64_t* __restrict__ seed_count) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i == 0) *seed_count = B;
  if (i >= B) return;
  const int64_t g = seeds[i];
  if (first[g] == (int)i) {
    node_map[g] = (int)i;
    first[g] = INT_MAX;
  }
}

__global__ void h_count(const int64_t* __restrict__ colptr, const int64_t* __restrict__ nodes, HStep st,
                        int64_t bound, int k, bool replace, int64_t* __restrict__ cnt) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r > bound) return;
  const int64_t begin = *st.tgt_begin;
  int64_t n = 0;
  if (r < *st.tgt_end - begin) {
    const int64_t g = nodes[begin + r];
    const int64_t d = colptr[g + 1] - colptr[g];
    n = k < 0 ? d : replace ? (d > 0 ? k : 0) : (d < k ? d : k);
  }
  cnt[r] = n;
}

__global__ void h_sample(const int64_t* __restrict__ colptr, const int* __restrict__ row,
                         const int64_t* __restrict__ nodes, const int64_t* __restrict__ off, HStep st, int hop,
                         int rel, int k, bool replace, uint64_t seed, const int* __restrict__ node_map,
                         int* __restrict__ first, int64_t* __restrict__ eid, int* __restrict__ cand,
                         int64_t* __restrict__ dst) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t begin = *st.tgt_begin;
  if (r >= *st.tgt_end - begin) return;
  const int64_t v = begin + r;
  const int64_t g = nodes[v];
  const int64_t start = colptr[g], d = colptr[g + 1] - start;
  const int64_t o = off[r], n = off[r + 1] - o;
  const int64_t e0 = *st.edge_begin + o;
  int64_t* pos = eid + e0;
  sample_positions(pos, n, d, k, replace, (uint32_t)r, (uint32_t)hop, (uint32_t)rel, seed);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = start + pos[i];
    pos[i] = e;
    const int s = row[e];
    cand[o + i] = s;
    dst[e0 + i] = v;
    if (node_map[s] < 0) atomicMin(first + s, (int)(o + i));
  }
}

__global__ void h_assign(const int* __restrict__ cand, const int* __restrict__ flag, const int* __restrict__ ids,
                         const int64_t* __restrict__ off, int64_t Fb, int64_t Eb, HStep st, int T, int src,
                         int* __restrict__ node_map, int* __restrict__ first, int64_t* __restrict__ nodes) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t base = st.src_now[src];
  if (i == 0) {  // (the other threads read only this step's entries)
    for (int t = 0; t < T; ++t) st.src_next[t] = st.src_now[t];
    st.src_next[src] = base + ids[Eb];
    *st.edge_next = *st.edge_begin + off[Fb];
  }
  add_new_node(i, Eb, cand, flag, ids, base, node_map, first, nodes);
}

__global__ void h_relabel(const int* __restrict__ cand, const int64_t* __restrict__ off, int64_t Fb, HStep st,
                          const int* __restrict__ node_map, int64_t* __restrict__ src) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= off[Fb]) return;
  src[*st.edge_begin + i] = node_map[cand[i]];
}

// counts: nodes per type per hop ([T][H + 1]), then edges per edge type per hop ([R][H])
__global__ void h_finish(const int64_t* __restrict__ rows, const int64_t* __restrict__ ebase, int T, int R, int H,
                         int64_t* __restrict__ counts) {
  if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h <= H; ++h) {
      const int64_t* end = rows + (int64_t)(1 + h * R) * T;
      const int64_t* begin = h == 0 ? rows : rows + (int64_t)(1 + (h - 1) * R) * T;
      counts[t * (H + 1) + h] = end[t] - begin[t];
    }
  for (int e = 0; e < R; ++e)
    for (int h = 0; h < H; ++h) counts[T * (H + 1) + e * H + h] = ebase[e * (H + 1) + h + 1] - ebase[e * (H + 1) + h];
}

__global__ void h_reset_map(const int64_t* __restrict__ nodes, const int64_t* __restrict__ total, int64_t bound,
                            int* __restrict__ node_map) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= bound || i >= *total) return;
  node_map[nodes[i]] = -1;
}

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>,
           at::Tensor>
hetero_neighbor_sample_cuda(at::TensorList colptrs, at::TensorList rows, c10::IntArrayRef edge_src,
                            c10::IntArrayRef edge_dst, at::TensorList seeds, c10::IntArrayRef fanouts, bool replace,
                            int64_t seed, at::TensorList node_maps, at::TensorList firsts) {
  const int64_t R = (int64_t)colptrs.size(), T = (int64_t)seeds.size();
  TORCH_CHECK((int64_t)rows.size() == R && (int64_t)edge_src.size() == R && (int64_t)edge_dst.size() == R,
              "pyg_tc: hetero_neighbor_sample: one colptr, row, source and target type per edge type");
  TORCH_CHECK(T > 0 && (int64_t)node_maps.size() == T && (int64_t)firsts.size() == T,
              "pyg_tc: hetero_neighbor_sample: one seed tensor, node_map and first per node type");
  TORCH_CHECK(R == 0 ? fanouts.empty() : (int64_t)fanouts.size() % R == 0,
              "pyg_tc: hetero_neighbor_sample: fanouts holds one list of hops per edge type");
  const int64_t H = R ? (int64_t)fanouts.size() / R : 0, S = H * R;
  c10::cuda::CUDAGuard guard(node_maps[0].device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto opts = node_maps[0].options().dtype(at::kLong);
  std::vector<int64_t> N(T), B(T);
  std::vector<at::Tensor> sd(T);
  for (int64_t t = 0; t < T; ++t) {
    N[t] = node_maps[t].numel();
    TORCH_CHECK(node_maps[t].is_cuda() && firsts[t].is_cuda() && node_maps[t].scalar_type() == at::kInt &&
                    firsts[t].scalar_type() == at::kInt && firsts[t].numel() == N[t] && N[t] < INT_MAX,
                "pyg_tc: hetero_neighbor_sample: node_map and first must be int32 CUDA tensors of the type's "
                "node count (below 2^31 - 1)");
    TORCH_CHECK(seeds[t].is_cuda() && seeds[t].scalar_type() == at::kLong && seeds[t].dim() == 1,
                "pyg_tc: hetero_neighbor_sample: seeds must be 1-D int64 CUDA tensors");
    sd[t] = seeds[t].contiguous();
    B[t] = sd[t].numel();
  }
  for (int64_t e = 0; e < R; ++e) {
    check_graph_array(colptrs[e], at::kLong, "colptr");
    check_graph_array(rows[e], at::kInt, "row");
    TORCH_CHECK(edge_src[e] >= 0 && edge_src[e] < T && edge_dst[e] >= 0 && edge_dst[e] < T &&
                    colptrs[e].numel() == N[edge_dst[e]] + 1,
                "pyg_tc: hetero_neighbor_sample: edge type ", e, " needs node types in range and a colptr of its "
                "target type's node count + 1");
    for (int64_t h = 0; h < H; ++h)
      TORCH_CHECK(fanouts[e * H + h] >= -1, "pyg_tc: hetero_neighbor_sample: fan-outs must be >= -1");
  }
  // Host bounds: Fb[t][h] targets of type t in hop h, Eb[e][h] edges (-1: read after the count's scan).
  std::vector<std::vector<int64_t>> Fb(T, std::vector<int64_t>(H + 1, 0)), Eb(R, std::vector<int64_t>(H, 0));
  for (int64_t t = 0; t < T; ++t) Fb[t][0] = B[t];
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t e = 0; e < R; ++e) {
      const int64_t k = fanouts[e * H + h];
      Eb[e][h] = k < 0 ? -1 : Fb[edge_dst[e]][h] * k;
    }
    for (int64_t t = 0; t < T; ++t) {
      int64_t sum = 0;
      for (int64_t e = 0; e < R; ++e)
        if (edge_src[e] == t) sum += Eb[e][h] < 0 ? N[t] : Eb[e][h];
      Fb[t][h + 1] = std::min(sum, N[t]);
    }
  }
  auto edge_bound = [&](int64_t e) {
    int64_t total = 0;
    for (int64_t h = 0; h < H; ++h) total += std::max<int64_t>(Eb[e][h], 0);
    return total;
  };
  std::vector<at::Tensor> nodes(T), eid(R), src(R), dst(R);
  std::vector<int64_t> node_bound(T);
  int64_t max_F = 1, max_E = 0;
  for (int64_t t = 0; t < T; ++t) {
    int64_t b = 0;
    for (int64_t h = 0; h <= H; ++h) b += Fb[t][h], max_F = std::max(max_F, Fb[t][h]);
    node_bound[t] = std::min(b, N[t] + B[t]);
    nodes[t] = at::empty({node_bound[t]}, opts);
  }
  for (int64_t e = 0; e < R; ++e) {
    eid[e] = at::empty({edge_bound(e)}, opts);
    src[e] = at::empty({edge_bound(e)}, opts);
    dst[e] = at::empty({edge_bound(e)}, opts);
    for (int64_t h = 0; h < H; ++h) max_E = std::max(max_E, Eb[e][h]);
  }
  auto counters = at::zeros({(S + 2) * T + R * (H + 1)}, opts);  // node count rows, then ebase
  int64_t* cnt_rows = counters.data_ptr<int64_t>();
  int64_t* ebase = cnt_rows + (S + 2) * T;
  auto cnt = at::empty({max_F + 1}, opts), off = at::empty({max_F + 1}, opts);
  auto cand = at::empty({max_E}, opts.dtype(at::kInt));
  auto flag = at::empty({max_E + 1}, opts.dtype(at::kInt)), ids = at::empty({max_E + 1}, opts.dtype(at::kInt));
  auto grow = [&](at::Tensor& t, int64_t n) {
    if (t.numel() >= n) return;
    auto bigger = at::empty({n}, t.options());
    bigger.narrow(0, 0, t.numel()).copy_(t);
    t = bigger;
  };
  for (int64_t t = 0; t < T; ++t) {
    int* fi = firsts[t].data_ptr<int>();
    if (B[t] > 0) {
      seed_bid<<<blocks_for(B[t]), kThreads, 0, stream>>>(sd[t].data_ptr<int64_t>(), B[t], fi,
                                                           nodes[t].data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    h_seed_map<<<blocks_for(B[t]), kThreads, 0, stream>>>(sd[t].data_ptr<int64_t>(), B[t], fi,
                                                          node_maps[t].data_ptr<int>(), cnt_rows + T + t);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  std::vector<int64_t> done(R, 0);  // summed bounds of each edge type's hops so far
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t e = 0; e < R; ++e) {
      const int64_t s = h * R + e, a = edge_src[e], b = edge_dst[e];
      const int k = (int)fanouts[e * H + h];
      HStep st{cnt_rows + (h == 0 ? 0 : 1 + (h - 1) * R) * T + b,
               cnt_rows + (1 + h * R) * T + b,
               cnt_rows + (1 + s) * T,
               cnt_rows + (2 + s) * T,
               ebase + e * (H + 1) + h,
               ebase + e * (H + 1) + h + 1};
      const int64_t F = Fb[b][h];
      const int64_t* cp = colptrs[e].data_ptr<int64_t>();
      h_count<<<blocks_for(F + 1), kThreads, 0, stream>>>(cp, nodes[b].data_ptr<int64_t>(), st, F, k, replace,
                                                          cnt.data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      exclusive_sum(cnt.data_ptr<int64_t>(), off.data_ptr<int64_t>(), F + 1, sd[0], stream);
      const int64_t* of = off.data_ptr<int64_t>();
      if (Eb[e][h] < 0) {  // all neighbours: the bound is the sum of degrees (one synchronisation)
        Eb[e][h] = read_scalar(of + F, stream);
        for (auto* t : {&eid[e], &src[e], &dst[e]}) grow(*t, edge_bound(e));
        grow(cand, Eb[e][h]);
        grow(flag, Eb[e][h] + 1);
        grow(ids, Eb[e][h] + 1);
      }
      const int64_t E = Eb[e][h];
      TORCH_CHECK(done[e] + E < INT_MAX, "pyg_tc: hetero_neighbor_sample: an edge type may hold fewer than "
                                         "2^31 - 1 edges of a batch");
      int* nm = node_maps[a].data_ptr<int>();
      int* fi = firsts[a].data_ptr<int>();
      h_sample<<<blocks_for(F), kThreads, 0, stream>>>(cp, rows[e].data_ptr<int>(), nodes[b].data_ptr<int64_t>(), of,
                                                       st, (int)h, (int)e, k, replace, (uint64_t)seed, nm, fi,
                                                       eid[e].data_ptr<int64_t>(), cand.data_ptr<int>(),
                                                       dst[e].data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      flag_new<<<blocks_for(E + 1), kThreads, 0, stream>>>(cand.data_ptr<int>(), of, F, E, nm, fi,
                                                           flag.data_ptr<int>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      exclusive_sum(flag.data_ptr<int>(), ids.data_ptr<int>(), E + 1, sd[0], stream);
      h_assign<<<blocks_for(E), kThreads, 0, stream>>>(cand.data_ptr<int>(), flag.data_ptr<int>(),
                                                       ids.data_ptr<int>(), of, F, E, st, (int)T, (int)a, nm, fi,
                                                       nodes[a].data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      h_relabel<<<blocks_for(E), kThreads, 0, stream>>>(cand.data_ptr<int>(), of, F, st, nm,
                                                        src[e].data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      done[e] += E;
    }
  }
  const int64_t n_counts = T * (H + 1) + R * H;
  auto counts_dev = at::empty({n_counts}, opts);
  h_finish<<<1, 32, 0, stream>>>(cnt_rows, ebase, (int)T, (int)R, (int)H, counts_dev.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  for (int64_t t = 0; t < T; ++t) {
    h_reset_map<<<blocks_for(node_bound[t]), kThreads, 0, stream>>>(
        nodes[t].data_ptr<int64_t>(), cnt_rows + (1 + S) * T + t, node_bound[t], node_maps[t].data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  // The one synchronisation of a call without fan-out -1: the counts.
  auto counts = at::empty({n_counts}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  C10_CUDA_CHECK(cudaMemcpyAsync(counts.data_ptr<int64_t>(), counts_dev.data_ptr<int64_t>(),
                                 n_counts * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int64_t* ct = counts.data_ptr<int64_t>();
  std::vector<at::Tensor> out_nodes(T), out_src(R), out_dst(R), out_eid(R);
  for (int64_t t = 0; t < T; ++t) {
    int64_t n = 0;
    for (int64_t h = 0; h <= H; ++h) n += ct[t * (H + 1) + h];
    out_nodes[t] = nodes[t].narrow(0, 0, n);
  }
  for (int64_t e = 0; e < R; ++e) {
    int64_t m = 0;
    for (int64_t h = 0; h < H; ++h) m += ct[T * (H + 1) + e * H + h];
    out_src[e] = src[e].narrow(0, 0, m);
    out_dst[e] = dst[e].narrow(0, 0, m);
    out_eid[e] = eid[e].narrow(0, 0, m);
  }
  return {out_nodes, out_src, out_dst, out_eid, counts.clone()};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("neighbor_sample", &neighbor_sample_cuda);
  m.impl("hetero_neighbor_sample", &hetero_neighbor_sample_cuda);
}

}  // namespace pyg_tc

// Attention family: the fused forward (score, online softmax, dropout,
// aggregation) over the forward CSR's unit schedule, for GAT (V2 = false:
// s = leaky_relu(a_src[j] + a_dst[i] + score[e])) and GATv2 (V2 = true:
// s = sum_c att_c leaky_relu(x[j, c] + x_r[i, c] + edge[e, c])).
//
// Each lane keeps its head's running maximum m, sum l and its share of the
// weighted feature sum, and folds a batch of kUnroll edges at a time: the
// state is rescaled by e^(m - m') only when the batch raises the maximum to
// m', then every edge adds e^(s - m'). Light rows are written directly (out = acc / l, lse = m +
// log l); the units of a heavy row write their (acc, m, l) to workspace
// slots, merged in a fixed order by merge_softmax_kernel. No atomics.
//
// This file: the kernel and its launcher (fp32, fp16, bf16); the entry
// point is in attn_host.cpp.

#include "attn/attn_device.cuh"
#include "common/static_switch.h"

namespace pyg_tc {
namespace attn {
namespace {

template <typename T, int V, int NV, bool V2>
__global__ void __launch_bounds__(kThreads, min_blocks(NV)) attn_forward_kernel(const AttnParams p) {
  using P = Pack<T, V>;
  constexpr int U = unroll_for(NV);
  const Lane ln = lane_of(p);
  const int H = p.H, C = p.C, HC = H * C;
  const int LH = ln.LH, q = ln.q, h = ln.h;
  const int4 un = ln.un;
  const int len = ln.len, maxlen = ln.maxlen;
  const int64_t i = un.x;
  const bool live = ln.live;
  const T* x = static_cast<const T*>(p.x);
  const T* edge = static_cast<const T*>(p.edge);
  const Dropout drop(p);

  float adst = 0.f;
  float xr[NV][V], att[NV][V];
  if (!V2) {
    if (live && p.a_dst != nullptr) adst = p.a_dst[i * H + h];
  } else {
    load_head_f<T, V, NV>(xr, static_cast<const T*>(p.x_r) + i * HC + h * C, q, LH, C, live);
    load_att<V, NV>(att, p.att, h, q, LH, C, live);
  }

  float m = -INFINITY, l = 0.f;
  float acc[NV][V];
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[k][v] = 0.f;

  for (int base = 0; base < maxlen; base += ln.L) {
    const int nb = min(len - base, ln.L);  // this unit's edges in the batch (may be <= 0)
    const int c = ln.l < nb ? __ldg(p.col + un.y + base + ln.l) : 0;
    const int jn = min(ln.L, maxlen - base);  // warp-uniform
    for (int j = 0; j < jn; j += U) {
      P buf[U][NV];
      float z[U];
      bool ok[U];
#pragma unroll
      for (int t = 0; t < U; ++t) {
        const int jj = j + t;
        const int cj = __shfl_sync(kFullMask, c, ln.g * ln.L + (jj & (ln.L - 1)));
        ok[t] = live && jj < nb;
        const int64_t e = (int64_t)un.y + base + jj;
        load_head<T, V, NV>(buf[t], x + (int64_t)cj * HC + h * C, q, LH, C, ok[t]);
        z[t] = 0.f;
        if (!V2 && ok[t]) {
          if (p.a_src != nullptr) z[t] += __ldg(p.a_src + (int64_t)cj * H + h);
          if (p.score != nullptr) z[t] += __ldg(p.score + e * H + h);
          z[t] += adst;
        }
      }
      float s[U];
#pragma unroll
      for (int t = 0; t < U; ++t) {
        if (!V2) {
          s[t] = leaky(z[t], p.slope);
        } else {
          float ee[NV][V];
          const int64_t e = (int64_t)un.y + base + j + t;
          load_head_f<T, V, NV>(ee, edge + e * HC + h * C, q, LH, C, ok[t] && edge != nullptr);
          float d = 0.f;
#pragma unroll
          for (int k = 0; k < NV; ++k)
#pragma unroll
            for (int v = 0; v < V; ++v) d += att[k][v] * leaky(to_f(buf[t][k].v[v]) + xr[k][v] + ee[k][v], p.slope);
          s[t] = head_sum(d, LH);
        }
        if (!ok[t]) s[t] = -INFINITY;
      }
      // Online softmax over the batch: one rescale of the state when the
      // batch raises the running maximum, then one exponential per edge.
      float bm = s[0];
#pragma unroll
      for (int t = 1; t < U; ++t) bm = fmaxf(bm, s[t]);
      if (bm > m) {
        const float sc = expf(m - bm);  // 0 while the state is empty (m = -inf)
        l *= sc;
#pragma unroll
        for (int k = 0; k < NV; ++k)
#pragma unroll
          for (int v = 0; v < V; ++v) acc[k][v] *= sc;
        m = bm;
      }
#pragma unroll
      for (int t = 0; t < U; ++t) {
        if (ok[t]) {
          const float pe = expf(s[t] - m);
          l += pe;
          const float pw = pe * drop.weight((int64_t)un.y + base + j + t, H, h);
#pragma unroll
          for (int k = 0; k < NV; ++k)
#pragma unroll
            for (int v = 0; v < V; ++v) acc[k][v] += pw * to_f(buf[t][k].v[v]);
        }
      }
    }
  }

  if (!live) return;
  if (un.w >= 0) {  // a unit of a heavy row: its state to its slot
    float* dst = p.ws + (int64_t)un.w * p.ws_stride;
    store_head_ws<V, NV>(dst + h * C, acc, q, LH, C);
    if (q == 0) {
      dst[HC + h] = m;
      dst[HC + H + h] = l;
    }
    return;
  }
  store_head<T, V, NV>(static_cast<T*>(p.out) + i * HC + h * C, acc, l > 0.f ? 1.f / l : 0.f, q, LH, C);
  if (q == 0) p.lse[i * H + h] = l > 0.f ? (double)m + (double)logf(l) : -INFINITY;
}

template <typename T, int V, int NV, bool V2>
void launch_forward(const AttnParams& p, cudaStream_t stream) {
  if (p.num_units > 0) {
    attn_forward_kernel<T, V, NV, V2><<<grid_of(p), kThreads, 0, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  launch_merge_softmax<T>(p, stream);
}

template <typename T, int V, int NV, bool V2>
struct Forward {  // attn_switch's launcher
  static void run(const AttnParams& p, cudaStream_t stream) { launch_forward<T, V, NV, V2>(p, stream); }
};

}  // namespace
}  // namespace attn

template <typename T>
void run_attn_forward(const AttnParams& p, cudaStream_t stream) {
  attn::attn_switch<T, attn::Forward>(p, stream);
}

template void run_attn_forward<float>(const AttnParams&, cudaStream_t);
template void run_attn_forward<__half>(const AttnParams&, cudaStream_t);
template void run_attn_forward<__nv_bfloat16>(const AttnParams&, cudaStream_t);

}  // namespace pyg_tc

// Attention family: the backward walk over the forward CSR (rows = targets).
// Recomputes each edge's logit s, alpha = e^(s - lse_i) and its dropout
// weight, and from dalpha = <grad_i, x_j> (times the dropout weight) forms
// ds = alpha (dalpha - delta_i), delta_i = <grad_i, out_i> - grad_lse_i.
// Produces the target-side and per-edge gradients:
//   GAT:   dz = ds * leaky'(z); g_dst[i] = sum_e dz, g_score[e] = dz;
//   GATv2: dz_c = ds * att_c * leaky'(z_c); g_r[i] = sum_e dz,
//          g_att[i] = sum_e ds * leaky(z) (per-row partials), g_edge[e] = dz.
// Heavy rows: per-unit partials to workspace slots, summed in slot order.
// No atomics; nothing of size E x H x C beyond g_edge (the shape of `edge`).

#include "attn/attn_device.cuh"
#include "common/static_switch.h"

namespace pyg_tc {
namespace attn {
namespace {

template <typename T, int V, int NV, bool V2>
__global__ void __launch_bounds__(kThreads, min_blocks(NV)) attn_backward_rows_kernel(const AttnParams p) {
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
  T* g_edge = static_cast<T*>(p.g_edge);
  const Dropout drop(p);

  float gi[NV][V];
  load_head_f<T, V, NV>(gi, static_cast<const T*>(p.grad) + i * HC + h * C, q, LH, C, live);
  const float2 lse_i = live ? p.lse_in[i * H + h] : make_float2(0.f, 0.f);
  const float delta_i = live ? p.delta[i * H + h] : 0.f;
  float adst = 0.f;
  float xr[NV][V], att[NV][V], gr[NV][V], gatt[NV][V];
  if (!V2) {
    if (live && p.a_dst != nullptr) adst = p.a_dst[i * H + h];
  } else {
    load_head_f<T, V, NV>(xr, static_cast<const T*>(p.x_r) + i * HC + h * C, q, LH, C, live);
    load_att<V, NV>(att, p.att, h, q, LH, C, live);
#pragma unroll
    for (int k = 0; k < NV; ++k)
#pragma unroll
      for (int v = 0; v < V; ++v) gr[k][v] = gatt[k][v] = 0.f;
  }
  float gdst = 0.f;

  for (int base = 0; base < maxlen; base += ln.L) {
    const int nb = min(len - base, ln.L);
    const int c = ln.l < nb ? __ldg(p.col + un.y + base + ln.l) : 0;
    const int jn = min(ln.L, maxlen - base);
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
        z[t] = adst;
        if (!V2 && ok[t]) {
          if (p.a_src != nullptr) z[t] += __ldg(p.a_src + (int64_t)cj * H + h);
          if (p.score != nullptr) z[t] += __ldg(p.score + e * H + h);
        }
      }
#pragma unroll
      for (int t = 0; t < U; ++t) {
        const int64_t e = (int64_t)un.y + base + j + t;
        float dot = 0.f;
#pragma unroll
        for (int k = 0; k < NV; ++k)
#pragma unroll
          for (int v = 0; v < V; ++v) dot += gi[k][v] * to_f(buf[t][k].v[v]);
        dot = head_sum(dot, LH);
        float s;
        float zz[NV][V];
        if (!V2) {
          s = leaky(z[t], p.slope);
        } else {
          load_head_f<T, V, NV>(zz, edge + e * HC + h * C, q, LH, C, ok[t] && edge != nullptr);
          float d = 0.f;
#pragma unroll
          for (int k = 0; k < NV; ++k)
#pragma unroll
            for (int v = 0; v < V; ++v) {
              zz[k][v] += to_f(buf[t][k].v[v]) + xr[k][v];
              d += att[k][v] * leaky(zz[k][v], p.slope);
            }
          s = head_sum(d, LH);
        }
        if (ok[t]) {
          const float alpha = expf((s - lse_i.x) - lse_i.y);
          const float ds = alpha * (dot * drop.weight(e, H, h) - delta_i);
          if (!V2) {
            const float dz = ds * dleaky(z[t], p.slope);
            gdst += dz;
            if (p.g_score != nullptr && q == 0) p.g_score[e * H + h] = dz;
          } else {
#pragma unroll
            for (int k = 0; k < NV; ++k) {
              P o;
#pragma unroll
              for (int v = 0; v < V; ++v) {
                const float dz = ds * att[k][v] * dleaky(zz[k][v], p.slope);
                gr[k][v] += dz;
                gatt[k][v] += ds * leaky(zz[k][v], p.slope);
                o.v[v] = from_f<T>(dz);
              }
              const int f = q * V + k * LH * V;
              if (g_edge != nullptr && f < C) *reinterpret_cast<P*>(g_edge + e * HC + h * C + f) = o;
            }
          }
        }
      }
    }
  }

  if (!live) return;
  if (un.w >= 0) {  // a unit of a heavy row: partial sums to its slot
    float* dst = p.ws + (int64_t)un.w * p.ws_stride;
    if (!V2) {
      if (q == 0) dst[h] = gdst;
    } else {
      store_head_ws<V, NV>(dst + h * C, gr, q, LH, C);
      store_head_ws<V, NV>(dst + HC + h * C, gatt, q, LH, C);
    }
    return;
  }
  if (!V2) {
    if (q == 0 && p.g_dst != nullptr) p.g_dst[i * H + h] = gdst;
  } else {
    store_head<T, V, NV>(static_cast<T*>(p.g_r) + i * HC + h * C, gr, 1.f, q, LH, C);
    store_head_ws<V, NV>(p.g_att + i * HC + h * C, gatt, q, LH, C);
  }
}

template <typename T, int V, int NV, bool V2>
void launch_rows(const AttnParams& p, cudaStream_t stream) {
  if (p.num_units > 0) {
    attn_backward_rows_kernel<T, V, NV, V2><<<grid_of(p), kThreads, 0, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const int HC = p.H * p.C;
  if (!V2) {
    if (p.g_dst != nullptr) launch_merge_sum<T>(p, 0, nullptr, p.H, p.g_dst, stream);
  } else {
    launch_merge_sum<T>(p, HC, static_cast<T*>(p.g_r), HC, p.g_att, stream);
  }
}

template <typename T, int V, int NV, bool V2>
struct Rows {  // attn_switch's launcher
  static void run(const AttnParams& p, cudaStream_t stream) { launch_rows<T, V, NV, V2>(p, stream); }
};

}  // namespace
}  // namespace attn

template <typename T>
void run_attn_backward_rows(const AttnParams& p, cudaStream_t stream) {
  attn::attn_switch<T, attn::Rows>(p, stream);
}

template void run_attn_backward_rows<float>(const AttnParams&, cudaStream_t);
template void run_attn_backward_rows<__half>(const AttnParams&, cudaStream_t);
template void run_attn_backward_rows<__nv_bfloat16>(const AttnParams&, cudaStream_t);

}  // namespace pyg_tc

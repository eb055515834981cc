// Attention family: the backward walk over the cached transpose (rows =
// sources j; t_col gives each position's target i, t_perm its forward edge
// e). Recomputes s, alpha and the dropout weight w of every out-edge of j
// and produces the source-side gradients:
//   g_x[j] = sum_e alpha_e w_e grad_i                 (the aggregation's transpose)
//          + sum_e dz_e                               (GATv2: x_j is also in the score)
//   g_src[j] = sum_e ds_e leaky'(z_e)                 (GAT)
// with ds = alpha (<grad_i, x_j> w - delta_i) as in the row walk; x_j stays
// in registers for the whole row. Heavy rows: partials to workspace slots,
// summed in slot order. No atomics, no per-edge buffer.

#include "attn/attn_device.cuh"
#include "common/static_switch.h"

namespace pyg_tc {
namespace attn {
namespace {

template <typename T, int V, int NV, bool V2>
__global__ void __launch_bounds__(kThreads, min_blocks(NV)) attn_backward_cols_kernel(const AttnParams p) {
  using P = Pack<T, V>;
  constexpr int U = unroll_for(NV);
  const Lane ln = lane_of(p);
  const int H = p.H, C = p.C, HC = H * C;
  const int LH = ln.LH, q = ln.q, h = ln.h;
  const int4 un = ln.un;
  const int len = ln.len, maxlen = ln.maxlen;
  const int64_t j0 = un.x;  // the source node of this row
  const bool live = ln.live;
  const T* grad = static_cast<const T*>(p.grad);
  const T* xr_all = static_cast<const T*>(p.x_r);
  const T* edge = static_cast<const T*>(p.edge);
  const Dropout drop(p);

  float xj[NV][V], att[NV][V], gx[NV][V];
  load_head_f<T, V, NV>(xj, static_cast<const T*>(p.x) + j0 * HC + h * C, q, LH, C, live);
  load_att<V, NV>(att, p.att, h, q, LH, C, V2 && live);
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) gx[k][v] = 0.f;
  const float asrc = (!V2 && live && p.a_src != nullptr) ? p.a_src[j0 * H + h] : 0.f;
  float gsrc = 0.f;

  for (int base = 0; base < maxlen; base += ln.L) {
    const int nb = min(len - base, ln.L);
    int c = 0, pe = 0;
    if (ln.l < nb) {
      c = __ldg(p.col + un.y + base + ln.l);
      pe = __ldg(p.perm + un.y + base + ln.l);
    }
    const int jn = min(ln.L, maxlen - base);
    for (int j = 0; j < jn; j += U) {
      P buf[U][NV];
      float z[U], dl[U];
      float2 lse[U];
      int it[U];
      int64_t et[U];
      bool ok[U];
#pragma unroll
      for (int t = 0; t < U; ++t) {
        const int jj = j + t;
        const int src = ln.g * ln.L + (jj & (ln.L - 1));
        it[t] = __shfl_sync(kFullMask, c, src);
        et[t] = __shfl_sync(kFullMask, pe, src);
        ok[t] = live && jj < nb;
        load_head<T, V, NV>(buf[t], grad + (int64_t)it[t] * HC + h * C, q, LH, C, ok[t]);
        lse[t] = ok[t] ? __ldg(p.lse_in + (int64_t)it[t] * H + h) : make_float2(0.f, 0.f);
        dl[t] = ok[t] ? __ldg(p.delta + (int64_t)it[t] * H + h) : 0.f;
        z[t] = asrc;
        if (!V2 && ok[t]) {
          if (p.a_dst != nullptr) z[t] += __ldg(p.a_dst + (int64_t)it[t] * H + h);
          if (p.score != nullptr) z[t] += __ldg(p.score + et[t] * H + h);
        }
      }
#pragma unroll
      for (int t = 0; t < U; ++t) {
        float dot = 0.f;
#pragma unroll
        for (int k = 0; k < NV; ++k)
#pragma unroll
          for (int v = 0; v < V; ++v) dot += xj[k][v] * to_f(buf[t][k].v[v]);
        dot = head_sum(dot, LH);
        float s;
        float zz[NV][V];
        if (!V2) {
          s = leaky(z[t], p.slope);
        } else {
          float xr[NV][V];
          load_head_f<T, V, NV>(xr, xr_all + (int64_t)it[t] * HC + h * C, q, LH, C, ok[t]);
          load_head_f<T, V, NV>(zz, edge + et[t] * HC + h * C, q, LH, C, ok[t] && edge != nullptr);
          float d = 0.f;
#pragma unroll
          for (int k = 0; k < NV; ++k)
#pragma unroll
            for (int v = 0; v < V; ++v) {
              zz[k][v] += xj[k][v] + xr[k][v];
              d += att[k][v] * leaky(zz[k][v], p.slope);
            }
          s = head_sum(d, LH);
        }
        if (ok[t]) {
          const float alpha = expf((s - lse[t].x) - lse[t].y);
          const float kw = drop.weight(et[t], H, h);
          const float ds = alpha * (dot * kw - dl[t]);
          const float w = alpha * kw;
#pragma unroll
          for (int k = 0; k < NV; ++k)
#pragma unroll
            for (int v = 0; v < V; ++v) {
              float gk = w * to_f(buf[t][k].v[v]);
              if (V2) gk += ds * att[k][v] * dleaky(zz[k][v], p.slope);
              gx[k][v] += gk;
            }
          if (!V2) gsrc += ds * dleaky(z[t], p.slope);
        }
      }
    }
  }

  if (!live) return;
  if (un.w >= 0) {
    float* dst = p.ws + (int64_t)un.w * p.ws_stride;
    store_head_ws<V, NV>(dst + h * C, gx, q, LH, C);
    if (!V2 && q == 0) dst[HC + h] = gsrc;
    return;
  }
  store_head<T, V, NV>(static_cast<T*>(p.g_x) + j0 * HC + h * C, gx, 1.f, q, LH, C);
  if (!V2 && q == 0 && p.g_src != nullptr) p.g_src[j0 * H + h] = gsrc;
}

template <typename T, int V, int NV, bool V2>
void launch_cols(const AttnParams& p, cudaStream_t stream) {
  if (p.num_units > 0) {
    attn_backward_cols_kernel<T, V, NV, V2><<<grid_of(p), kThreads, 0, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  launch_merge_sum<T>(p, p.H * p.C, static_cast<T*>(p.g_x), V2 ? 0 : p.H, V2 ? nullptr : p.g_src,
                      stream);
}

template <typename T, int V, int NV, bool V2>
struct Cols {  // attn_switch's launcher
  static void run(const AttnParams& p, cudaStream_t stream) { launch_cols<T, V, NV, V2>(p, stream); }
};

}  // namespace
}  // namespace attn

template <typename T>
void run_attn_backward_cols(const AttnParams& p, cudaStream_t stream) {
  attn::attn_switch<T, attn::Cols>(p, stream);
}

template void run_attn_backward_cols<float>(const AttnParams&, cudaStream_t);
template void run_attn_backward_cols<__half>(const AttnParams&, cudaStream_t);
template void run_attn_backward_cols<__nv_bfloat16>(const AttnParams&, cudaStream_t);

}  // namespace pyg_tc

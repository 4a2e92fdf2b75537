// LayerNorm / RMSNorm forward and backward kernels for CUDA and ROCm (HIP).
//
// This file includes no torch header (only kernels.h -> gpu_runtime.h), so
// nvcc does not parse torch once per architecture and kbuild can compile-check
// its device code with hipcc where no ROCm torch is installed.
//
// The algorithm mirrors the CPU kernels (layer_norm_cpu/):
// - Forward: one thread block per row (grid-stride over rows). Each thread
//   loads its share of the row once, as 16-byte packs when the layout allows
//   it, into registers; the block reduces sum(s) (or sum(s^2) for RMSNorm),
//   then LayerNorm's sum((s - mean)^2) over the registers (two-pass variance
//   without a second read of memory), and the output is written from the
//   registers. Rows too long for the registers take a loop kernel that reads
//   the row again (from L2) instead.
// - Backward: a fixed number of blocks, each looping over rows; per row the
//   block reduces sum(g) and sum(g * xhat) and writes grad_input; grad_weight
//   and grad_bias are summed per thread in registers over the block's rows,
//   written as one partial row per block, and summed over blocks by a second
//   kernel (deterministic: fixed order).
// All arithmetic is fp32; 16-bit values are rounded once per stored value
// (RMSNorm rounds the normalized value before the weight multiply, as
// LlamaRMSNorm does).

#include "kernels.h"

namespace layer_norm_gpu {
namespace {

constexpr int kMaxThreads = 1024;
// Most values of a row per thread held in registers. Blocks have up to 1024
// threads, i.e. at most 64 registers per thread: the forward keeps one array
// of values (32 of them spilled), the backward four. So rows of up to 16384
// (forward) and 8192 (backward) elements stay in registers; longer ones take
// the loop kernels.
constexpr int kMaxFwdValues = 16;
constexpr int kMaxBwdValues = 8;

template <typename T>
using op = gpu::opmath<T>;

// v rounded to T and widened again: what storing and reloading gives.
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return op<T>::load(op<T>::store(v));
}

template <int V>
struct Int {
  static constexpr int value = V;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Blocks of the grid-stride loops over rows.
inline unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(min64(rows, int64_t{1} << 30));
}

inline bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- forward -----------------------------------------------------------------

template <typename T, int VEC, int PACKS>
__global__ void __launch_bounds__(kMaxThreads) norm_fwd_kernel(NormFwdArgs<T> a) {
  using P = gpu::Pack<T, VEC>;
  __shared__ float red[gpu::kMaxWarps];
  const int64_t npacks = a.n / VEC;
  const float inv_n = 1.0f / static_cast<float>(a.n);
  const P *w = reinterpret_cast<const P *>(a.weight);
  const P *b = reinterpret_cast<const P *>(a.bias);

  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const P *x = reinterpret_cast<const P *>(a.input + row * a.input_stride);
    float v[PACKS][VEC];
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < npacks) {
        const P px = x[i];
        if (a.residual != nullptr) {
          const P pr = reinterpret_cast<const P *>(a.residual + row * a.residual_stride)[i];
          P ps;
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            ps.v[e] = op<T>::store(op<T>::load(px.v[e]) + op<T>::load(pr.v[e]));
            v[k][e] = op<T>::load(ps.v[e]);
          }
          reinterpret_cast<P *>(a.residual_out + row * a.residual_out_stride)[i] = ps;
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            v[k][e] = op<T>::load(px.v[e]);
          }
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          acc += a.rms ? v[k][e] * v[k][e] : v[k][e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          v[k][e] = 0.0f;
        }
      }
    }

    const float total = gpu::block_sum(acc, red);
    float mean = 0.0f;
    float var;
    if (a.rms) {
      var = total * inv_n;
    } else {
      mean = total * inv_n;
      // Corrected two-pass: sums of d = s - mean and d^2 over the registers.
      float acc_d = 0.0f;
      float acc_d2 = 0.0f;
#pragma unroll
      for (int k = 0; k < PACKS; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i < npacks) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float d = v[k][e] - mean;
            acc_d += d;
            acc_d2 += d * d;
          }
        }
      }
      const float shift = gpu::block_sum(acc_d, red) * inv_n;
      mean += shift;
      var = fmaxf(gpu::block_sum(acc_d2, red) * inv_n - shift * shift, 0.0f);
    }
    const float rstd = 1.0f / sqrtf(var + a.eps);
    if (threadIdx.x == 0) {
      if (!a.rms) {
        a.mean[row] = mean;
      }
      a.rstd[row] = rstd;
    }

    P *y = reinterpret_cast<P *>(a.out + row * a.out_stride);
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < npacks) {
        P pw{};
        P pb{};
        if (w != nullptr) {
          pw = w[i];
        }
        if (b != nullptr) {
          pb = b[i];
        }
        P py;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          float o;
          if (a.rms) {
            // LlamaRMSNorm: weight * (s * rstd).to(input_dtype).
            o = round_to<T>(v[k][e] * rstd);
            if (w != nullptr) {
              o *= op<T>::load(pw.v[e]);
            }
          } else {
            o = (v[k][e] - mean) * rstd;
            if (w != nullptr) {
              o *= op<T>::load(pw.v[e]);
            }
            if (b != nullptr) {
              o += op<T>::load(pb.v[e]);
            }
          }
          py.v[e] = op<T>::store(o);
        }
        y[i] = py;
      }
    }
  }
}

// Rows longer than the registers hold: the same computation, one element per
// thread per step, reading the row again for the later sweeps (from L2: a
// block's row is far smaller than the cache).
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) norm_fwd_loop_kernel(NormFwdArgs<T> a) {
  __shared__ float red[gpu::kMaxWarps];
  const int64_t n = a.n;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T *x = a.input + row * a.input_stride;
    const T *res = a.residual != nullptr ? a.residual + row * a.residual_stride : nullptr;
    T *res_out = a.residual != nullptr ? a.residual_out + row * a.residual_out_stride : nullptr;
    // What the later sweeps read: s, i.e. the residual_out just written (by
    // this same thread, at the same index) or the input.
    const T *s = res_out != nullptr ? res_out : x;
    float acc = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float v = op<T>::load(x[j]);
      if (res != nullptr) {
        const T rounded = op<T>::store(v + op<T>::load(res[j]));
        res_out[j] = rounded;
        v = op<T>::load(rounded);
      }
      acc += a.rms ? v * v : v;
    }
    const float total = gpu::block_sum(acc, red);
    float mean = 0.0f;
    float var;
    if (a.rms) {
      var = total * inv_n;
    } else {
      mean = total * inv_n;
      float acc_d = 0.0f;
      float acc_d2 = 0.0f;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float d = op<T>::load(s[j]) - mean;
        acc_d += d;
        acc_d2 += d * d;
      }
      const float shift = gpu::block_sum(acc_d, red) * inv_n;
      mean += shift;
      var = fmaxf(gpu::block_sum(acc_d2, red) * inv_n - shift * shift, 0.0f);
    }
    const float rstd = 1.0f / sqrtf(var + a.eps);
    if (threadIdx.x == 0) {
      if (!a.rms) {
        a.mean[row] = mean;
      }
      a.rstd[row] = rstd;
    }
    T *y = a.out + row * a.out_stride;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float v = op<T>::load(s[j]);
      float o;
      if (a.rms) {
        o = round_to<T>(v * rstd);
        if (a.weight != nullptr) {
          o *= op<T>::load(a.weight[j]);
        }
      } else {
        o = (v - mean) * rstd;
        if (a.weight != nullptr) {
          o *= op<T>::load(a.weight[j]);
        }
        if (a.bias != nullptr) {
          o += op<T>::load(a.bias[j]);
        }
      }
      y[j] = op<T>::store(o);
    }
  }
}

// Threads and packs per thread for a row of `npacks` packs: the fewest packs
// per thread that keep the block at <= max_threads (few registers, many
// blocks per SM); 0 threads when even max_packs per thread do not fit in
// kMaxThreads threads.
inline int max_packs_for(int max_values, int vec) {
  const int p = max_values / vec;
  return p < 8 ? p : 8;  // a power of two: 1, 2, 4 or 8
}

struct BlockShape {
  int threads;
  int packs;
};

inline BlockShape block_shape(int64_t npacks, int max_packs, int64_t max_threads) {
  for (int p = 1; p <= max_packs; p *= 2) {
    const int64_t t = round_up(ceil_div(npacks, p), GPU_THREAD_GRANULARITY);
    if (t <= max_threads || (p == max_packs && t <= kMaxThreads)) {
      return {static_cast<int>(t), p};
    }
  }
  return {0, 0};
}

// Launches the register kernel for the block shape; instantiates only the
// packs-per-thread counts that fit the register budget (block_shape never
// picks the others).
template <typename T, int VEC>
void launch_fwd(const NormFwdArgs<T> &a, const BlockShape &s, gpu::stream_t stream) {
  const unsigned grid = row_grid(a.rows);
  const auto go = [&](auto packs) {
    constexpr int P = decltype(packs)::value;
    if constexpr (P * VEC <= kMaxFwdValues) {
      norm_fwd_kernel<T, VEC, P><<<grid, s.threads, 0, stream>>>(a);
    }
  };
  switch (s.packs) {
    case 1: go(Int<1>{}); break;
    case 2: go(Int<2>{}); break;
    case 4: go(Int<4>{}); break;
    default: go(Int<8>{}); break;
  }
}

// ---- backward ------------------------------------------------------------------

template <typename T, int VEC, int PACKS>
__global__ void __launch_bounds__(kMaxThreads) norm_bwd_kernel(NormBwdArgs<T> a) {
  using P = gpu::Pack<T, VEC>;
  __shared__ float red[gpu::kMaxWarps];
  const int64_t npacks = a.n / VEC;
  const float inv_n = 1.0f / static_cast<float>(a.n);

  // grad_weight/grad_bias of this thread's columns, summed over the block's
  // rows. (The weight is reloaded per row from the cache rather than kept in
  // registers: four arrays per thread fit without spilling, five would not.)
  float dw[PACKS][VEC];
  float db[PACKS][VEC];
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      dw[k][e] = 0.0f;
      db[k][e] = 0.0f;
    }
  }
  const P *w = reinterpret_cast<const P *>(a.weight);

  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const P *x = reinterpret_cast<const P *>(a.input + row * a.input_stride);
    const P *dy = reinterpret_cast<const P *>(a.grad_out + row * a.grad_out_stride);
    const float mean = a.rms ? 0.0f : a.mean[row];
    const float rstd = a.rstd[row];
    float xh[PACKS][VEC];
    float g[PACKS][VEC];
    float sum_g = 0.0f;
    float sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < npacks) {
        const P px = x[i];
        const P pdy = dy[i];
        P pw{};
        if (w != nullptr) {
          pw = w[i];
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float xhat = (op<T>::load(px.v[e]) - mean) * rstd;
          const float d = op<T>::load(pdy.v[e]);
          xh[k][e] = xhat;
          g[k][e] = w != nullptr ? d * op<T>::load(pw.v[e]) : d;
          sum_g += g[k][e];
          sum_gx += g[k][e] * xhat;
          // RMSNorm's weight multiplied the normalized value rounded to T.
          dw[k][e] += d * (a.rms ? round_to<T>(xhat) : xhat);
          db[k][e] += d;
        }
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          xh[k][e] = 0.0f;
          g[k][e] = 0.0f;
        }
      }
    }
    const float c1 = gpu::block_sum(sum_gx, red) * inv_n;
    const float c2 = a.rms ? 0.0f : gpu::block_sum(sum_g, red) * inv_n;

    P *dx = reinterpret_cast<P *>(a.grad_input + row * a.grad_input_stride);
    const P *dres = a.grad_residual_out != nullptr
        ? reinterpret_cast<const P *>(a.grad_residual_out + row * a.grad_residual_out_stride)
        : nullptr;
#pragma unroll
    for (int k = 0; k < PACKS; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < npacks) {
        P pr{};
        if (dres != nullptr) {
          pr = dres[i];
        }
        P out;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          float v = rstd * (g[k][e] - c2 - xh[k][e] * c1);
          if (dres != nullptr) {
            v += op<T>::load(pr.v[e]);
          }
          out.v[e] = op<T>::store(v);
        }
        dx[i] = out;
      }
    }
  }

  float *part_w = a.workspace + static_cast<int64_t>(blockIdx.x) * 2 * a.n;
  float *part_b = part_w + a.n;
#pragma unroll
  for (int k = 0; k < PACKS; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < npacks) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        part_w[i * VEC + e] = dw[k][e];
        part_b[i * VEC + e] = db[k][e];
      }
    }
  }
}

// Long rows: two sweeps per row over memory (L2), the block's partial sums of
// grad_weight/grad_bias kept in its workspace row (each thread only touches
// its own columns, so no synchronization is needed).
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) norm_bwd_loop_kernel(NormBwdArgs<T> a) {
  __shared__ float red[gpu::kMaxWarps];
  const int64_t n = a.n;
  const float inv_n = 1.0f / static_cast<float>(n);
  float *part_w = a.workspace + static_cast<int64_t>(blockIdx.x) * 2 * n;
  float *part_b = part_w + n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    part_w[j] = 0.0f;
    part_b[j] = 0.0f;
  }
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T *x = a.input + row * a.input_stride;
    const T *dy = a.grad_out + row * a.grad_out_stride;
    const float mean = a.rms ? 0.0f : a.mean[row];
    const float rstd = a.rstd[row];
    float sum_g = 0.0f;
    float sum_gx = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float xhat = (op<T>::load(x[j]) - mean) * rstd;
      const float d = op<T>::load(dy[j]);
      const float g = a.weight != nullptr ? d * op<T>::load(a.weight[j]) : d;
      sum_g += g;
      sum_gx += g * xhat;
      part_w[j] += d * (a.rms ? round_to<T>(xhat) : xhat);
      part_b[j] += d;
    }
    const float c1 = gpu::block_sum(sum_gx, red) * inv_n;
    const float c2 = a.rms ? 0.0f : gpu::block_sum(sum_g, red) * inv_n;
    T *dx = a.grad_input + row * a.grad_input_stride;
    const T *dres = a.grad_residual_out != nullptr
        ? a.grad_residual_out + row * a.grad_residual_out_stride
        : nullptr;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float xhat = (op<T>::load(x[j]) - mean) * rstd;
      const float d = op<T>::load(dy[j]);
      const float g = a.weight != nullptr ? d * op<T>::load(a.weight[j]) : d;
      float v = rstd * (g - c2 - xhat * c1);
      if (dres != nullptr) {
        v += op<T>::load(dres[j]);
      }
      dx[j] = op<T>::store(v);
    }
  }
}

// grad_weight[j] / grad_bias[j] = sum over blocks of the workspace partials.
// A block covers 32 columns; its 8 thread rows split the partial rows, then
// row 0 adds the 8 sums (fixed order: deterministic).
constexpr int kColumns = 32;
constexpr int kColumnSplit = 8;

template <typename T>
__global__ void column_sum_kernel(const float *workspace, int64_t blocks, int64_t n,
                                  T *grad_weight, T *grad_bias) {
  __shared__ float sw[kColumnSplit][kColumns + 1];
  __shared__ float sb[kColumnSplit][kColumns + 1];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  float acc_w = 0.0f;
  float acc_b = 0.0f;
  if (j < n) {
    for (int64_t blk = threadIdx.y; blk < blocks; blk += kColumnSplit) {
      acc_w += workspace[(blk * 2) * n + j];
      acc_b += workspace[(blk * 2 + 1) * n + j];
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc_w;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    float tw = 0.0f;
    float tb = 0.0f;
    for (int r = 0; r < kColumnSplit; ++r) {
      tw += sw[r][threadIdx.x];
      tb += sb[r][threadIdx.x];
    }
    if (grad_weight != nullptr) {
      grad_weight[j] = op<T>::store(tw);
    }
    if (grad_bias != nullptr) {
      grad_bias[j] = op<T>::store(tb);
    }
  }
}

template <typename T, int VEC>
void launch_bwd(const NormBwdArgs<T> &a, const BlockShape &s, gpu::stream_t stream) {
  const unsigned grid = static_cast<unsigned>(a.blocks);
  const auto go = [&](auto packs) {
    constexpr int P = decltype(packs)::value;
    if constexpr (P * VEC <= kMaxBwdValues) {
      norm_bwd_kernel<T, VEC, P><<<grid, s.threads, 0, stream>>>(a);
    }
  };
  switch (s.packs) {
    case 1: go(Int<1>{}); break;
    case 2: go(Int<2>{}); break;
    case 4: go(Int<4>{}); break;
    default: go(Int<8>{}); break;
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------

template <typename T>
gpu::error_t norm_fwd_launch(const NormFwdArgs<T> &a, gpu::stream_t stream) {
  if (a.rows <= 0 || a.n <= 0) {
    return gpu::success;
  }
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = a.n % VEC == 0 && a.input_stride % VEC == 0 && a.out_stride % VEC == 0 &&
                   aligned16(a.input) && aligned16(a.out) &&
                   (a.weight == nullptr || aligned16(a.weight)) &&
                   (a.bias == nullptr || aligned16(a.bias)) &&
                   (a.residual == nullptr ||
                    (a.residual_stride % VEC == 0 && a.residual_out_stride % VEC == 0 &&
                     aligned16(a.residual) && aligned16(a.residual_out)));
  const int max_packs = max_packs_for(kMaxFwdValues, vec ? VEC : 1);
  const BlockShape s = block_shape(vec ? a.n / VEC : a.n, max_packs, 512);
  if (s.threads == 0) {
    norm_fwd_loop_kernel<T><<<row_grid(a.rows), kMaxThreads, 0, stream>>>(a);
  } else if (vec) {
    launch_fwd<T, VEC>(a, s, stream);
  } else {
    launch_fwd<T, 1>(a, s, stream);
  }
  return gpu::last_error();
}

int64_t norm_bwd_blocks(int64_t rows) {
  // Enough blocks to fill the device a few times over; each block then sums
  // grad_weight over rows / blocks rows in registers.
  const int sms = gpu::multiprocessor_count();
  return min64(rows, static_cast<int64_t>(sms > 0 ? sms : 108) * 4);
}

template <typename T>
gpu::error_t norm_bwd_launch(const NormBwdArgs<T> &a, gpu::stream_t stream) {
  if (a.rows <= 0 || a.n <= 0 || a.blocks <= 0) {
    return a.rows <= 0 || a.n <= 0 ? gpu::success : gpu::invalid_value;
  }
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = a.n % VEC == 0 && a.input_stride % VEC == 0 && a.grad_out_stride % VEC == 0 &&
                   a.grad_input_stride % VEC == 0 && aligned16(a.input) &&
                   aligned16(a.grad_out) && aligned16(a.grad_input) &&
                   (a.weight == nullptr || aligned16(a.weight)) &&
                   (a.grad_residual_out == nullptr ||
                    (a.grad_residual_out_stride % VEC == 0 && aligned16(a.grad_residual_out)));
  const int max_packs = max_packs_for(kMaxBwdValues, vec ? VEC : 1);
  const BlockShape s = block_shape(vec ? a.n / VEC : a.n, max_packs, kMaxThreads);
  if (s.threads == 0) {
    norm_bwd_loop_kernel<T><<<static_cast<unsigned>(a.blocks), kMaxThreads, 0, stream>>>(a);
  } else if (vec) {
    launch_bwd<T, VEC>(a, s, stream);
  } else {
    launch_bwd<T, 1>(a, s, stream);
  }
  gpu::error_t status = gpu::last_error();
  if (status != gpu::success) {
    return status;
  }
  if (a.grad_weight != nullptr || a.grad_bias != nullptr) {
    const dim3 block(kColumns, kColumnSplit);
    const unsigned grid = static_cast<unsigned>(ceil_div(a.n, kColumns));
    column_sum_kernel<T><<<grid, block, 0, stream>>>(a.workspace, a.blocks, a.n, a.grad_weight,
                                                     a.grad_bias);
    status = gpu::last_error();
  }
  return status;
}

#define LAYER_NORM_INSTANTIATE(T)                                                  \
  template gpu::error_t norm_fwd_launch<T>(const NormFwdArgs<T> &, gpu::stream_t); \
  template gpu::error_t norm_bwd_launch<T>(const NormBwdArgs<T> &, gpu::stream_t);

LAYER_NORM_INSTANTIATE(float)
LAYER_NORM_INSTANTIATE(gpu::half)
LAYER_NORM_INSTANTIATE(gpu::bfloat16)

#undef LAYER_NORM_INSTANTIATE

}  // namespace layer_norm_gpu

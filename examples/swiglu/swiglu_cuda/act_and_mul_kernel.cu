// The __global__ kernels of the CUDA/ROCm backend and their launchers. This
// file includes no torch header, so kbuild compile-checks its device code for
// every rocm-arch even where only hipcc (no ROCm torch) is installed, and nvcc
// does not parse torch's headers once per architecture.
//
// One thread block row per input row (blockIdx.x), and several blocks along a
// row when there are few rows (blockIdx.y). When d, every row stride and
// every base pointer allow it, each thread moves 16 bytes per load and store
// (4 fp32 or 8 bf16/fp16 values); otherwise the same kernel runs with one
// element per access. All arithmetic is in fp32 (activations.h); 16-bit
// results are rounded once.
#include "swiglu_cuda/act_and_mul_kernel.h"

namespace {

using swiglu::Activation;

// The activations.h math policy on the GPU: the toolkit's accurate functions
// (the kernels are bound by memory bandwidth, not by these).
struct DeviceMath {
  using V = float;
  __device__ static float exp_neg(float x) { return expf(x); }
  __device__ static float recip(float x) { return 1.0f / x; }
  __device__ static float neg_abs(float x) { return -fabsf(x); }
  __device__ static float select_neg(float z, float a, float b) { return z < 0.0f ? a : b; }
  __device__ static float fma(float a, float b, float c) { return fmaf(a, b, c); }
};

// N values of T moved as one aligned access (16 bytes when N * sizeof(T) == 16).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <class A, typename T, int VEC>
__global__ void act_and_mul_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t d,
                                   int64_t out_stride, int64_t in_stride) {
  using P = Pack<T, VEC>;
  using op = gpu::opmath<T>;
  const int64_t row = blockIdx.x;
  const P* gate = reinterpret_cast<const P*>(in + row * in_stride);
  const P* up = reinterpret_cast<const P*>(in + row * in_stride + d);
  P* o = reinterpret_cast<P*>(out + row * out_stride);
  const int64_t n = d / VEC;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.y;
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    const P g = gate[i];
    const P u = up[i];
    P r;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      r.v[k] = op::store(
          swiglu::act_and_mul<DeviceMath, A>(op::load(g.v[k]), op::load(u.v[k])));
    }
    o[i] = r;
  }
}

template <class A, typename T, int VEC>
__global__ void act_and_mul_backward_kernel(T* __restrict__ grad_input,
                                            const T* __restrict__ grad_out,
                                            const T* __restrict__ in, int64_t d,
                                            int64_t grad_input_stride,
                                            int64_t grad_out_stride, int64_t in_stride) {
  using P = Pack<T, VEC>;
  using op = gpu::opmath<T>;
  const int64_t row = blockIdx.x;
  const P* gate = reinterpret_cast<const P*>(in + row * in_stride);
  const P* up = reinterpret_cast<const P*>(in + row * in_stride + d);
  const P* dout = reinterpret_cast<const P*>(grad_out + row * grad_out_stride);
  P* d_gate = reinterpret_cast<P*>(grad_input + row * grad_input_stride);
  P* d_up = reinterpret_cast<P*>(grad_input + row * grad_input_stride + d);
  const int64_t n = d / VEC;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.y;
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    const P g = gate[i];
    const P u = up[i];
    const P go = dout[i];
    P dg;
    P du;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const swiglu::GradPair<float> grad = swiglu::act_and_mul_grad<DeviceMath, A>(
          op::load(g.v[k]), op::load(u.v[k]), op::load(go.v[k]));
      dg.v[k] = op::store(grad.gate);
      du.v[k] = op::store(grad.up);
    }
    d_gate[i] = dg;
    d_up[i] = du;
  }
}

constexpr int64_t kThreads = 256;

// Launches kernel<<<grid, block>>>(args...) for rows of n vectors each.
template <class Kernel, class... Args>
void launch(Kernel kernel, int64_t rows, int64_t n, gpu::stream_t stream, Args... args) {
  const int64_t threads = n < kThreads ? (n + 31) / 32 * 32 : kThreads;
  // Few rows: spread each row over more blocks so that the GPU fills up.
  int64_t blocks_per_row = 1;
  if (rows < 1024) {
    const int64_t wanted = 1024 / rows;
    const int64_t useful = (n + threads - 1) / threads;
    blocks_per_row = wanted < useful ? wanted : useful;
    blocks_per_row = blocks_per_row < 65535 ? blocks_per_row : 65535;
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(blocks_per_row));
  kernel<<<grid, static_cast<unsigned>(threads), 0, stream>>>(args...);
}

// Whether a stride (or d) allows accesses of VEC elements.
template <int VEC>
bool aligned(int64_t value) {
  return value % VEC == 0;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

namespace swiglu {

template <typename T>
gpu::error_t act_and_mul_launch(Activation act, T* out, const T* in, int64_t rows, int64_t d,
                                int64_t out_stride, int64_t in_stride, gpu::stream_t stream) {
  if (rows <= 0 || d <= 0) {
    return gpu::success;
  }
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = aligned16(out) && aligned16(in) && aligned<VEC>(d) &&
                   aligned<VEC>(out_stride) && aligned<VEC>(in_stride);
  with_activation<DeviceMath>(act, [&](auto a) {
    using A = decltype(a);
    if (vec) {
      launch(act_and_mul_kernel<A, T, VEC>, rows, d / VEC, stream, out, in, d, out_stride,
             in_stride);
    } else {
      launch(act_and_mul_kernel<A, T, 1>, rows, d, stream, out, in, d, out_stride, in_stride);
    }
  });
  return gpu::last_error();
}

template <typename T>
gpu::error_t act_and_mul_backward_launch(Activation act, T* grad_input, const T* grad_out,
                                         const T* in, int64_t rows, int64_t d,
                                         int64_t grad_input_stride, int64_t grad_out_stride,
                                         int64_t in_stride, gpu::stream_t stream) {
  if (rows <= 0 || d <= 0) {
    return gpu::success;
  }
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = aligned16(grad_input) && aligned16(grad_out) && aligned16(in) &&
                   aligned<VEC>(d) &&
                   aligned<VEC>(grad_input_stride) && aligned<VEC>(grad_out_stride) &&
                   aligned<VEC>(in_stride);
  with_activation<DeviceMath>(act, [&](auto a) {
    using A = decltype(a);
    if (vec) {
      launch(act_and_mul_backward_kernel<A, T, VEC>, rows, d / VEC, stream, grad_input,
             grad_out, in, d, grad_input_stride, grad_out_stride, in_stride);
    } else {
      launch(act_and_mul_backward_kernel<A, T, 1>, rows, d, stream, grad_input, grad_out, in,
             d, grad_input_stride, grad_out_stride, in_stride);
    }
  });
  return gpu::last_error();
}

#define SWIGLU_INSTANTIATE(T)                                                                 \
  template gpu::error_t act_and_mul_launch<T>(Activation, T*, const T*, int64_t, int64_t,    \
                                              int64_t, int64_t, gpu::stream_t);              \
  template gpu::error_t act_and_mul_backward_launch<T>(Activation, T*, const T*, const T*,   \
                                                       int64_t, int64_t, int64_t, int64_t,   \
                                                       int64_t, gpu::stream_t);

SWIGLU_INSTANTIATE(float)
SWIGLU_INSTANTIATE(gpu::half)
SWIGLU_INSTANTIATE(gpu::bfloat16)

}  // namespace swiglu

// CUDA implementation of silu_and_mul.
//
// One thread block row per input row (blockIdx.x), optionally several blocks
// along a long row (blockIdx.y). When d, both row strides and both base
// pointers allow it, each thread moves 16 bytes per load/store (4 fp32 or
// 8 bf16/fp16 values); otherwise a one-element-per-thread kernel is used.
// All arithmetic is in fp32; 16-bit results are rounded once.

#include "swiglu_cuda/silu_and_mul.h"

#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace swiglu {
namespace cuda {
namespace {

// ---- device code -----------------------------------------------------------

// N values of T moved as one aligned access (16 bytes when N * sizeof(T) == 16).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// silu(g) * u with sigmoid from e = exp(-|g|) (as in the CPU kernels): the
// denominator stays in [1, 2], so no intermediate overflows for large |g|.
__device__ __forceinline__ float silu_mul(float g, float u) {
  const float e = expf(-fabsf(g));
  const float inv = 1.0f / (1.0f + e);
  const float sigmoid = g < 0.0f ? e * inv : inv;
  return g * sigmoid * u;
}

template <typename scalar_t, int VEC>
__global__ void silu_and_mul_kernel(scalar_t* __restrict__ out,
                                    const scalar_t* __restrict__ in, int64_t d,
                                    int64_t out_row_stride,
                                    int64_t in_row_stride) {
  using P = Pack<scalar_t, VEC>;
  const int64_t row = blockIdx.x;
  const P* gate = reinterpret_cast<const P*>(in + row * in_row_stride);
  const P* up = reinterpret_cast<const P*>(in + row * in_row_stride + d);
  P* o = reinterpret_cast<P*>(out + row * out_row_stride);

  const int64_t n = d / VEC;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.y;
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
       i < n; i += step) {
    const P g = gate[i];
    const P u = up[i];
    P r;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      r.v[k] = static_cast<scalar_t>(
          silu_mul(static_cast<float>(g.v[k]), static_cast<float>(u.v[k])));
    }
    o[i] = r;
  }
}

// ---- host code -------------------------------------------------------------

constexpr int kThreads = 256;

// See swiglu_cpu/silu_and_mul.cpp: the element stride between rows if the
// leading dimensions collapse into one, else -1.
int64_t collapsed_row_stride(const at::Tensor& t) {
  int64_t row_stride = -1;
  int64_t expected = -1;
  for (int64_t i = t.dim() - 2; i >= 0; --i) {
    if (t.size(i) == 1) {
      continue;
    }
    if (row_stride < 0) {
      row_stride = t.stride(i);
    } else if (t.stride(i) != expected) {
      return -1;
    }
    expected = t.stride(i) * t.size(i);
  }
  return row_stride < 0 ? t.size(-1) : row_stride;
}

template <typename scalar_t, int VEC>
void launch(scalar_t* out, const scalar_t* in, int64_t rows, int64_t d,
            int64_t out_row_stride, int64_t in_row_stride,
            cudaStream_t stream) {
  const int64_t n = d / VEC;
  const int threads = static_cast<int>(
      std::min<int64_t>(kThreads, std::max<int64_t>(32, (n + 31) / 32 * 32)));
  // Few rows: spread each row over more blocks so that the GPU fills up.
  int64_t blocks_per_row = 1;
  if (rows < 1024) {
    blocks_per_row = std::min<int64_t>((n + threads - 1) / threads,
                                       std::max<int64_t>(1, 1024 / rows));
  }
  const dim3 grid(static_cast<unsigned>(rows),
                  static_cast<unsigned>(std::min<int64_t>(blocks_per_row, 65535)));
  silu_and_mul_kernel<scalar_t, VEC><<<grid, threads, 0, stream>>>(
      out, in, d, out_row_stride, in_row_stride);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t>
void run(scalar_t* out, const scalar_t* in, int64_t rows, int64_t d,
         int64_t out_row_stride, int64_t in_row_stride, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(scalar_t);
  const bool aligned =
      reinterpret_cast<std::uintptr_t>(out) % 16 == 0 &&
      reinterpret_cast<std::uintptr_t>(in) % 16 == 0 && d % VEC == 0 &&
      out_row_stride % VEC == 0 && in_row_stride % VEC == 0;
  if (aligned) {
    launch<scalar_t, VEC>(out, in, rows, d, out_row_stride, in_row_stride,
                          stream);
  } else {
    launch<scalar_t, 1>(out, in, rows, d, out_row_stride, in_row_stride,
                        stream);
  }
}

}  // namespace

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 1,
              "silu_and_mul: input must have at least one dimension, got a "
              "0-dim tensor");
  const int64_t width = input.size(-1);
  TORCH_CHECK(width % 2 == 0,
              "silu_and_mul: the last dimension of input must be even "
              "(gate and up halves of size d each), got input of shape ",
              input.sizes());
  const int64_t d = width / 2;

  TORCH_CHECK(out.device() == input.device(),
              "silu_and_mul: out and input must be on the same device, got out "
              "on ", out.device(), " and input on ", input.device());
  TORCH_CHECK(input.is_cuda(),
              "silu_and_mul: this is the CUDA implementation, got input on ",
              input.device());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "silu_and_mul: unsupported dtype ", dtype,
              " (expected float32, bfloat16 or float16)");
  TORCH_CHECK(out.scalar_type() == dtype,
              "silu_and_mul: out and input must have the same dtype, got out ",
              out.scalar_type(), " and input ", dtype);

  std::vector<int64_t> expected_shape(input.sizes().begin(), input.sizes().end());
  expected_shape.back() = d;
  TORCH_CHECK(out.sizes() == at::IntArrayRef(expected_shape),
              "silu_and_mul: out must have shape ", at::IntArrayRef(expected_shape),
              " for input of shape ", input.sizes(), ", got ", out.sizes());

  if (out.numel() == 0) {
    return;
  }

  TORCH_CHECK(input.stride(-1) == 1,
              "silu_and_mul: the last dimension of input must be contiguous "
              "(stride 1), got strides ", input.strides());
  TORCH_CHECK(out.stride(-1) == 1 || d == 1,
              "silu_and_mul: the last dimension of out must be contiguous "
              "(stride 1), got strides ", out.strides());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, input);

  const c10::cuda::CUDAGuard device_guard(input.device());

  at::Tensor in = input;
  int64_t in_row_stride = collapsed_row_stride(in);
  if (in_row_stride < 0) {
    in = input.contiguous();
    in_row_stride = width;
  }
  at::Tensor dst = out;
  int64_t out_row_stride = collapsed_row_stride(dst);
  if (out_row_stride < 0) {
    dst = at::empty(out.sizes(), out.options());
    out_row_stride = d;
  }
  const int64_t rows = out.numel() / d;
  TORCH_CHECK(rows <= std::numeric_limits<int32_t>::max(),
              "silu_and_mul: too many rows (", rows, ")");

  // The stream that at::cuda::getCurrentCUDAStream() returns as well.
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  AT_DISPATCH_SWITCH(
      dtype, "silu_and_mul_cuda",
      AT_DISPATCH_CASE(at::ScalarType::Float,
                       [&] {
                         run<scalar_t>(dst.data_ptr<scalar_t>(),
                                       in.const_data_ptr<scalar_t>(), rows, d,
                                       out_row_stride, in_row_stride, stream);
                       })
      AT_DISPATCH_CASE(at::ScalarType::BFloat16,
                       [&] {
                         run<scalar_t>(dst.data_ptr<scalar_t>(),
                                       in.const_data_ptr<scalar_t>(), rows, d,
                                       out_row_stride, in_row_stride, stream);
                       })
      AT_DISPATCH_CASE(at::ScalarType::Half, [&] {
        run<scalar_t>(dst.data_ptr<scalar_t>(), in.const_data_ptr<scalar_t>(),
                      rows, d, out_row_stride, in_row_stride, stream);
      }));

  if (!dst.is_same(out)) {
    out.copy_(dst);
  }
}

}  // namespace cuda
}  // namespace swiglu

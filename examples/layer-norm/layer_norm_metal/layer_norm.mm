// Host side of the Metal backend: argument checks (common/norm_checks.h, as
// every backend), pipeline lookup per kernel and dtype, and encoding on torch's
// current MPS stream. The shaders are in layer_norm.metal.
#include <torch/all.h>

#include <ATen/mps/MPSStream.h>

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "metal_params.h"
#include "common/norm_checks.h"
#include "torch-ext/torch_binding.h"

// The build embeds the compiled shaders in the shared object and names a
// generated header that provides EMBEDDED_METALLIB_NAMESPACE::createLibrary(
// device, &error). Without it, a layer_norm.metallib beside the shared object
// is loaded instead.
#ifdef EMBEDDED_METALLIB_HEADER
#include EMBEDDED_METALLIB_HEADER
#endif

namespace layer_norm_ops {
namespace {

id<MTLBuffer> buffer_of(const at::Tensor &t) {
  return __builtin_bit_cast(id<MTLBuffer>, t.storage().data());
}

NSUInteger byte_offset(const at::Tensor &t) {
  return static_cast<NSUInteger>(t.storage_offset() * t.element_size());
}

id<MTLLibrary> load_library(id<MTLDevice> device) {
  NSError *error = nil;
#ifdef EMBEDDED_METALLIB_HEADER
  id<MTLLibrary> library = EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error);
#else
  Dl_info info;
  TORCH_CHECK(dladdr(reinterpret_cast<void *>(&load_library), &info) != 0,
              "layer-norm: cannot locate the loaded shared object");
  NSString *so_path = [NSString stringWithUTF8String:info.dli_fname];
  NSString *lib_path = [[so_path stringByDeletingLastPathComponent]
      stringByAppendingPathComponent:@"layer_norm.metallib"];
  id<MTLLibrary> library = [device newLibraryWithURL:[NSURL fileURLWithPath:lib_path]
                                               error:&error];
#endif
  TORCH_CHECK(library != nil, "layer-norm: failed to load the Metal library: ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  return library;
}

// Pipelines are built once per kernel name and kept for the life of the process.
id<MTLComputePipelineState> pipeline_for(id<MTLDevice> device, const std::string &name) {
  static std::mutex mutex;
  static id<MTLLibrary> library = nil;
  static std::unordered_map<std::string, id<MTLComputePipelineState>> cache;

  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(name);
  if (it != cache.end()) {
    return it->second;
  }
  if (library == nil) {
    library = load_library(device);
  }
  id<MTLFunction> function =
      [library newFunctionWithName:[NSString stringWithUTF8String:name.c_str()]];
  TORCH_CHECK(function != nil, "layer-norm: Metal function ", name,
              " not found in the library (bfloat16 needs Metal 3.1 / macOS 14)");
  NSError *error = nil;
  id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function
                                                                               error:&error];
  TORCH_CHECK(pipeline != nil, "layer-norm: failed to create the pipeline for ", name, ": ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  cache.emplace(name, pipeline);
  return pipeline;
}

std::string kernel_name(const char *kernel, at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return std::string(kernel) + "_float";
    case at::kHalf:
      return std::string(kernel) + "_half";
    case at::kBFloat16:
      return std::string(kernel) + "_bfloat";
    default:
      break;
  }
  TORCH_CHECK(false, "layer-norm: unsupported dtype ", dtype,
              " on MPS (float32, float16, bfloat16 are supported)");
  return std::string();
}

unsigned int u32(int64_t v, const char *what) {
  TORCH_CHECK(v >= 0 && v <= static_cast<int64_t>(UINT32_MAX), "layer-norm: ", what,
              " exceeds 2^32 on MPS");
  return static_cast<unsigned int>(v);
}

// Binds t at `index`, or `fallback` when t is undefined (the shader does not
// read it then, but every declared buffer gets a binding).
void bind(id<MTLComputeCommandEncoder> encoder, const at::Tensor &t, const at::Tensor &fallback,
          NSUInteger index) {
  const at::Tensor &b = t.defined() ? t : fallback;
  [encoder setBuffer:buffer_of(b) offset:byte_offset(b) atIndex:index];
}

// One threadgroup per row: threads a multiple of the SIMD width, up to what
// the pipeline allows.
NSUInteger row_threads(id<MTLComputePipelineState> pipeline, int64_t n) {
  const NSUInteger simd = pipeline.threadExecutionWidth;
  const NSUInteger cap = MIN(pipeline.maxTotalThreadsPerThreadgroup, static_cast<NSUInteger>(1024));
  const NSUInteger wanted = (static_cast<NSUInteger>(n) + simd - 1) / simd * simd;
  return MAX(simd, MIN(cap / simd * simd, wanted));
}

void check_mps(const at::Tensor &input, const char *op) {
  TORCH_CHECK(input.device().is_mps(), op, ": this is the Metal implementation, got input on ",
              input.device());
}

void norm_fwd(const checks::NormFwd &f, bool rms, double eps) {
  if (f.rows == 0) {
    return;
  }
  NormParams params{};
  params.rows = u32(f.rows, "the number of rows");
  params.n = u32(f.n, "the row length");
  params.input_stride = u32(f.input_stride, "a row stride");
  params.residual_stride = u32(f.residual_stride, "a row stride");
  params.residual_out_stride = u32(f.residual_out_stride, "a row stride");
  params.out_stride = u32(f.out_stride, "a row stride");
  params.eps = static_cast<float>(eps);
  params.flags = (rms ? LN_FLAG_RMS : 0u) | (f.weight.defined() ? LN_FLAG_WEIGHT : 0u) |
                 (f.bias.defined() ? LN_FLAG_BIAS : 0u) |
                 (f.residual.defined() ? LN_FLAG_RESIDUAL : 0u);

  at::mps::MPSStream *stream = at::mps::getCurrentMPSStream();
  TORCH_CHECK(stream != nullptr, "layer-norm: no current MPS stream");
  id<MTLComputePipelineState> pipeline =
      pipeline_for(stream->device(), kernel_name("norm_fwd", f.input.scalar_type()));
  const NSUInteger threads = row_threads(pipeline, f.n);
  dispatch_sync(stream->queue(), ^() {
    id<MTLComputeCommandEncoder> encoder = stream->commandEncoder();
    [encoder setComputePipelineState:pipeline];
    bind(encoder, f.input, f.input, LN_FWD_INPUT);
    bind(encoder, f.residual, f.input, LN_FWD_RESIDUAL);
    bind(encoder, f.residual_out, f.out, LN_FWD_RESIDUAL_OUT);
    bind(encoder, f.out, f.out, LN_FWD_OUT);
    bind(encoder, f.weight, f.input, LN_FWD_WEIGHT);
    bind(encoder, f.bias, f.input, LN_FWD_BIAS);
    bind(encoder, f.mean, f.rstd, LN_FWD_MEAN);
    bind(encoder, f.rstd, f.rstd, LN_FWD_RSTD);
    [encoder setBytes:&params length:sizeof(params) atIndex:LN_FWD_PARAMS];
    [encoder dispatchThreadgroups:MTLSizeMake(params.rows, 1, 1)
            threadsPerThreadgroup:MTLSizeMake(threads, 1, 1)];
  });
  stream->synchronize(at::mps::SyncType::COMMIT);
}

void norm_bwd(const checks::NormBwd &b, bool rms) {
  if (b.rows == 0) {
    if (b.grad_weight.defined()) {
      b.grad_weight.zero_();
    }
    if (b.grad_bias.defined()) {
      b.grad_bias.zero_();
    }
    return;
  }
  NormParams params{};
  params.rows = u32(b.rows, "the number of rows");
  params.n = u32(b.n, "the row length");
  params.input_stride = u32(b.input_stride, "a row stride");
  params.residual_stride = u32(b.grad_residual_out_stride, "a row stride");
  params.residual_out_stride = u32(b.grad_out_stride, "a row stride");
  params.out_stride = u32(b.grad_input_stride, "a row stride");
  params.flags = (rms ? LN_FLAG_RMS : 0u) | (b.weight.defined() ? LN_FLAG_WEIGHT : 0u) |
                 (b.grad_residual_out.defined() ? LN_FLAG_RESIDUAL : 0u);
  // The column kernel's flags say which sums to write.
  NormParams column_params = params;
  column_params.flags = (rms ? LN_FLAG_RMS : 0u) |
                        (b.grad_weight.defined() ? LN_FLAG_WEIGHT : 0u) |
                        (b.grad_bias.defined() ? LN_FLAG_BIAS : 0u);
  const bool columns = b.grad_weight.defined() || b.grad_bias.defined();

  at::mps::MPSStream *stream = at::mps::getCurrentMPSStream();
  TORCH_CHECK(stream != nullptr, "layer-norm: no current MPS stream");
  const at::ScalarType dtype = b.input.scalar_type();
  id<MTLComputePipelineState> rows_pipeline =
      pipeline_for(stream->device(), kernel_name("norm_bwd_rows", dtype));
  id<MTLComputePipelineState> columns_pipeline =
      columns ? pipeline_for(stream->device(), kernel_name("norm_bwd_columns", dtype)) : nil;
  const NSUInteger threads = row_threads(rows_pipeline, b.n);
  const at::Tensor mean = b.mean.defined() ? b.mean : b.rstd;
  dispatch_sync(stream->queue(), ^() {
    id<MTLComputeCommandEncoder> encoder = stream->commandEncoder();
    [encoder setComputePipelineState:rows_pipeline];
    bind(encoder, b.grad_out, b.grad_out, LN_BWD_GRAD_OUT);
    bind(encoder, b.grad_residual_out, b.grad_out, LN_BWD_GRAD_RESIDUAL_OUT);
    bind(encoder, b.input, b.input, LN_BWD_INPUT);
    bind(encoder, mean, mean, LN_BWD_MEAN);
    bind(encoder, b.rstd, b.rstd, LN_BWD_RSTD);
    bind(encoder, b.weight, b.input, LN_BWD_WEIGHT);
    bind(encoder, b.grad_input, b.grad_input, LN_BWD_GRAD_INPUT);
    [encoder setBytes:&params length:sizeof(params) atIndex:LN_BWD_PARAMS];
    [encoder dispatchThreadgroups:MTLSizeMake(params.rows, 1, 1)
            threadsPerThreadgroup:MTLSizeMake(threads, 1, 1)];
    if (columns) {
      [encoder setComputePipelineState:columns_pipeline];
      bind(encoder, b.grad_out, b.grad_out, LN_BWD_GRAD_OUT);
      bind(encoder, b.input, b.input, LN_BWD_INPUT);
      bind(encoder, mean, mean, LN_BWD_MEAN);
      bind(encoder, b.rstd, b.rstd, LN_BWD_RSTD);
      const at::Tensor &any_grad = b.grad_weight.defined() ? b.grad_weight : b.grad_bias;
      bind(encoder, b.grad_weight, any_grad, LN_BWD_GRAD_WEIGHT);
      bind(encoder, b.grad_bias, any_grad, LN_BWD_GRAD_BIAS);
      [encoder setBytes:&column_params length:sizeof(column_params) atIndex:LN_BWD_PARAMS];
      const NSUInteger group = MIN(columns_pipeline.maxTotalThreadsPerThreadgroup,
                                   static_cast<NSUInteger>(256));
      [encoder dispatchThreads:MTLSizeMake(params.n, 1, 1)
          threadsPerThreadgroup:MTLSizeMake(group, 1, 1)];
    }
  });
  stream->synchronize(at::mps::SyncType::COMMIT);
}

}  // namespace

void layer_norm_fwd(at::Tensor &out, const std::optional<at::Tensor> &residual_out,
                    at::Tensor &mean, at::Tensor &rstd, const at::Tensor &input,
                    const std::optional<at::Tensor> &residual,
                    const std::optional<at::Tensor> &weight,
                    const std::optional<at::Tensor> &bias, double eps) {
  check_mps(input, "layer_norm_fwd");
  const auto f = checks::prepare_fwd("layer_norm_fwd", out, residual_out, &mean, rstd, input,
                                     residual, weight, bias, /*allow_double=*/false);
  norm_fwd(f, /*rms=*/false, eps);
}

void rms_norm_fwd(at::Tensor &out, const std::optional<at::Tensor> &residual_out,
                  at::Tensor &rstd, const at::Tensor &input,
                  const std::optional<at::Tensor> &residual,
                  const std::optional<at::Tensor> &weight, double eps) {
  check_mps(input, "rms_norm_fwd");
  const auto f = checks::prepare_fwd("rms_norm_fwd", out, residual_out, nullptr, rstd, input,
                                     residual, weight, std::nullopt, /*allow_double=*/false);
  norm_fwd(f, /*rms=*/true, eps);
}

void layer_norm_bwd(at::Tensor &grad_input, const std::optional<at::Tensor> &grad_weight,
                    const std::optional<at::Tensor> &grad_bias, const at::Tensor &grad_out,
                    const std::optional<at::Tensor> &grad_residual_out,
                    const at::Tensor &input, const at::Tensor &mean, const at::Tensor &rstd,
                    const std::optional<at::Tensor> &weight) {
  check_mps(input, "layer_norm_bwd");
  const auto b = checks::prepare_bwd("layer_norm_bwd", grad_input, grad_weight, &grad_bias,
                                     grad_out, grad_residual_out, input, &mean, rstd, weight,
                                     /*allow_double=*/false);
  norm_bwd(b, /*rms=*/false);
}

void rms_norm_bwd(at::Tensor &grad_input, const std::optional<at::Tensor> &grad_weight,
                  const at::Tensor &grad_out,
                  const std::optional<at::Tensor> &grad_residual_out, const at::Tensor &input,
                  const at::Tensor &rstd, const std::optional<at::Tensor> &weight) {
  check_mps(input, "rms_norm_bwd");
  const auto b = checks::prepare_bwd("rms_norm_bwd", grad_input, grad_weight, nullptr, grad_out,
                                     grad_residual_out, input, nullptr, rstd, weight,
                                     /*allow_double=*/false);
  norm_bwd(b, /*rms=*/true);
}

void silu_and_mul(at::Tensor &out, const at::Tensor &input) {
  check_mps(input, "silu_and_mul");
  const auto s = checks::prepare_silu_and_mul(out, input, /*allow_double=*/false);
  if (s.rows == 0) {
    return;
  }
  SiluParams params{};
  params.rows = u32(s.rows, "the number of rows");
  params.d = u32(s.d, "the row length");
  params.in_stride = u32(s.input_stride, "a row stride");
  params.out_stride = u32(s.out_stride, "a row stride");
  at::mps::MPSStream *stream = at::mps::getCurrentMPSStream();
  TORCH_CHECK(stream != nullptr, "layer-norm: no current MPS stream");
  id<MTLComputePipelineState> pipeline =
      pipeline_for(stream->device(), kernel_name("silu_and_mul", input.scalar_type()));
  const NSUInteger group = MIN(pipeline.maxTotalThreadsPerThreadgroup, static_cast<NSUInteger>(256));
  dispatch_sync(stream->queue(), ^() {
    id<MTLComputeCommandEncoder> encoder = stream->commandEncoder();
    [encoder setComputePipelineState:pipeline];
    bind(encoder, s.input, s.input, 0);
    bind(encoder, s.out, s.out, 1);
    [encoder setBytes:&params length:sizeof(params) atIndex:2];
    [encoder dispatchThreads:MTLSizeMake(params.d, params.rows, 1)
        threadsPerThreadgroup:MTLSizeMake(group, 1, 1)];
  });
  stream->synchronize(at::mps::SyncType::COMMIT);
}

}  // namespace layer_norm_ops

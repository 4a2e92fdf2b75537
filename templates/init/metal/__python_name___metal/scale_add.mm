// Host side of the Metal scale_add: look up the compute pipeline for the
// dtype and encode it on torch's current MPS stream.
#include <ATen/mps/MPSStream.h>
#include <torch/all.h>

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "torch-ext/torch_binding.h"

// The build embeds the compiled shaders (scale_add.metal) in the shared
// object and names a generated header providing
// EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error). Without it, a
// scale_add.metallib beside the shared object is loaded instead.
#ifdef EMBEDDED_METALLIB_HEADER
#include EMBEDDED_METALLIB_HEADER
#endif

namespace {

// Must match ScaleAddParams in scale_add.metal.
struct ScaleAddParams {
  float alpha;
  uint32_t n;
};

id<MTLBuffer> buffer_of(const torch::Tensor &t) {
  return __builtin_bit_cast(id<MTLBuffer>, t.storage().data());
}

NSUInteger byte_offset(const torch::Tensor &t) {
  return static_cast<NSUInteger>(t.storage_offset() * t.element_size());
}

id<MTLLibrary> load_library(id<MTLDevice> device) {
  NSError *error = nil;
#ifdef EMBEDDED_METALLIB_HEADER
  id<MTLLibrary> library = EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error);
#else
  Dl_info info;
  TORCH_CHECK(dladdr(reinterpret_cast<void *>(&load_library), &info) != 0,
              "scale_add: cannot locate the loaded shared object");
  NSString *so_path = [NSString stringWithUTF8String:info.dli_fname];
  NSString *lib_path =
      [[so_path stringByDeletingLastPathComponent] stringByAppendingPathComponent:@"scale_add.metallib"];
  id<MTLLibrary> library = [device newLibraryWithURL:[NSURL fileURLWithPath:lib_path] error:&error];
#endif
  TORCH_CHECK(library != nil, "scale_add: failed to load the Metal library: ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  return library;
}

// Pipelines are built once per kernel name and kept for the life of the process.
id<MTLComputePipelineState> pipeline_for(id<MTLDevice> device, const std::string &kernel_name) {
  static std::mutex mutex;
  static id<MTLLibrary> library = nil;
  static std::unordered_map<std::string, id<MTLComputePipelineState>> cache;

  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(kernel_name);
  if (it != cache.end()) {
    return it->second;
  }
  if (library == nil) {
    library = load_library(device);
  }
  id<MTLFunction> function = [library newFunctionWithName:[NSString stringWithUTF8String:kernel_name.c_str()]];
  TORCH_CHECK(function != nil, "scale_add: Metal function ", kernel_name, " not found in the library");
  NSError *error = nil;
  id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function error:&error];
  TORCH_CHECK(pipeline != nil, "scale_add: failed to create the pipeline for ", kernel_name, ": ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  cache.emplace(kernel_name, pipeline);
  return pipeline;
}

std::string kernel_name_for(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "scale_add_float";
    case at::kHalf:
      return "scale_add_half";
    case at::kBFloat16:
      return "scale_add_bfloat";
    default:
      TORCH_CHECK(false, "scale_add: unsupported dtype ", dtype, " on MPS (float32, float16, bfloat16 are supported)");
  }
}

}  // namespace

void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha) {
  TORCH_CHECK(x.device().is_mps(), "scale_add: x must be an MPS tensor");
  TORCH_CHECK(y.device() == x.device() && out.device() == x.device(),
              "scale_add: out, x and y must be on the same device");
  TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(),
              "scale_add: out, x and y must have the same shape (got ", out.sizes(), ", ", x.sizes(), ", ",
              y.sizes(), ")");
  TORCH_CHECK(x.scalar_type() == y.scalar_type() && x.scalar_type() == out.scalar_type(),
              "scale_add: out, x and y must have the same dtype");
  TORCH_CHECK(x.numel() <= static_cast<int64_t>(UINT32_MAX),
              "scale_add: tensors over 2^32 elements are not supported on MPS");

  const torch::Tensor xc = x.contiguous();
  const torch::Tensor yc = y.contiguous();
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(xc);
  const std::string kernel_name = kernel_name_for(xc.scalar_type());

  const NSUInteger n = static_cast<NSUInteger>(xc.numel());
  if (n > 0) {
    at::mps::MPSStream *stream = at::mps::getCurrentMPSStream();
    TORCH_CHECK(stream != nullptr, "scale_add: no current MPS stream");
    id<MTLDevice> device = stream->device();
    id<MTLComputePipelineState> pipeline = pipeline_for(device, kernel_name);
    const ScaleAddParams params{static_cast<float>(alpha), static_cast<uint32_t>(n)};

    dispatch_sync(stream->queue(), ^() {
      id<MTLComputeCommandEncoder> encoder = stream->commandEncoder();
      [encoder setComputePipelineState:pipeline];
      [encoder setBuffer:buffer_of(dst) offset:byte_offset(dst) atIndex:0];
      [encoder setBuffer:buffer_of(xc) offset:byte_offset(xc) atIndex:1];
      [encoder setBuffer:buffer_of(yc) offset:byte_offset(yc) atIndex:2];
      [encoder setBytes:&params length:sizeof(params) atIndex:3];
      const NSUInteger group = MIN(static_cast<NSUInteger>(pipeline.maxTotalThreadsPerThreadgroup), n);
      [encoder dispatchThreads:MTLSizeMake(n, 1, 1) threadsPerThreadgroup:MTLSizeMake(group, 1, 1)];
    });
    stream->synchronize(at::mps::SyncType::COMMIT);
  }

  if (!direct) {
    out.copy_(dst);
  }
}

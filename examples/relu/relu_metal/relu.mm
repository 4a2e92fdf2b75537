// Host side of the Metal ReLU: look up the compute pipeline for the dtype and
// encode it on torch's current MPS stream.
#include <torch/all.h>

#include <ATen/mps/MPSStream.h>

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "common.h"
#include "torch-ext/torch_binding.h"

// The build embeds the compiled shaders (relu.metal) in the shared object and
// names a generated header that provides
// EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error). Without it, a
// relu.metallib beside the shared object is loaded instead.
#ifdef EMBEDDED_METALLIB_HEADER
#include EMBEDDED_METALLIB_HEADER
#endif

namespace {

id<MTLBuffer> buffer_of(const torch::Tensor &t) {
  return __builtin_bit_cast(id<MTLBuffer>, t.storage().data());
}

NSUInteger byte_offset(const torch::Tensor &t) {
  return static_cast<NSUInteger>(t.storage_offset() * t.element_size());
}

id<MTLLibrary> load_library(id<MTLDevice> device) {
  NSError *error = nil;
#ifdef EMBEDDED_METALLIB_HEADER
  id<MTLLibrary> library =
      EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error);
#else
  Dl_info info;
  TORCH_CHECK(dladdr(reinterpret_cast<void *>(&load_library), &info) != 0,
              "relu: cannot locate the loaded shared object");
  NSString *so_path = [NSString stringWithUTF8String:info.dli_fname];
  NSString *lib_path = [[so_path stringByDeletingLastPathComponent]
      stringByAppendingPathComponent:@"relu.metallib"];
  id<MTLLibrary> library =
      [device newLibraryWithURL:[NSURL fileURLWithPath:lib_path] error:&error];
#endif
  TORCH_CHECK(library != nil, "relu: failed to load the Metal library: ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  return library;
}

// Pipelines are built once per (device, kernel name) and kept for the life of
// the process.
id<MTLComputePipelineState> pipeline_for(id<MTLDevice> device,
                                         const std::string &kernel_name) {
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
  id<MTLFunction> function = [library
      newFunctionWithName:[NSString stringWithUTF8String:kernel_name.c_str()]];
  TORCH_CHECK(function != nil, "relu: Metal function ", kernel_name,
              " not found in the library");
  NSError *error = nil;
  id<MTLComputePipelineState> pipeline =
      [device newComputePipelineStateWithFunction:function error:&error];
  TORCH_CHECK(pipeline != nil, "relu: failed to create the pipeline for ",
              kernel_name, ": ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  cache.emplace(kernel_name, pipeline);
  return pipeline;
}

std::string kernel_name_for(at::ScalarType dtype) {
  switch (dtype) {
    case at::ScalarType::Float:
      return RELU_KERNEL_FLOAT;
    case at::ScalarType::Half:
      return RELU_KERNEL_HALF;
    case at::ScalarType::BFloat16:
      return RELU_KERNEL_BFLOAT;
    default:
      TORCH_CHECK(false, "relu: unsupported dtype ", dtype,
                  " on MPS (float32, float16, bfloat16 are supported)");
  }
}

}  // namespace

void relu(torch::Tensor &out, torch::Tensor const &input) {
  TORCH_CHECK(input.device().is_mps(), "relu: input must be an MPS tensor");
  TORCH_CHECK(out.device() == input.device(),
              "relu: out and input must be on the same device");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(),
              "relu: out has dtype ", out.scalar_type(), " but input has ",
              input.scalar_type());
  TORCH_CHECK(out.sizes() == input.sizes(), "relu: out has shape ",
              out.sizes(), " but input has ", input.sizes());
  TORCH_CHECK(input.numel() <= static_cast<int64_t>(UINT32_MAX),
              "relu: tensors over 2^32 elements are not supported on MPS");

  const torch::Tensor in = input.contiguous();
  const bool direct = out.is_contiguous();
  torch::Tensor dst = direct ? out : torch::empty_like(in);
  const std::string kernel_name = kernel_name_for(in.scalar_type());

  const NSUInteger n = static_cast<NSUInteger>(in.numel());
  if (n > 0) {
    at::mps::MPSStream *stream = at::mps::getCurrentMPSStream();
    TORCH_CHECK(stream != nullptr, "relu: no current MPS stream");
    id<MTLDevice> device = stream->device();
    id<MTLComputePipelineState> pipeline = pipeline_for(device, kernel_name);
    const ReluParams params{static_cast<unsigned int>(n)};

    dispatch_sync(stream->queue(), ^() {
      id<MTLComputeCommandEncoder> encoder = stream->commandEncoder();
      [encoder setComputePipelineState:pipeline];
      [encoder setBuffer:buffer_of(in) offset:byte_offset(in) atIndex:0];
      [encoder setBuffer:buffer_of(dst) offset:byte_offset(dst) atIndex:1];
      [encoder setBytes:&params length:sizeof(params) atIndex:2];
      const NSUInteger group =
          MIN(static_cast<NSUInteger>(pipeline.maxTotalThreadsPerThreadgroup),
              n);
      [encoder dispatchThreads:MTLSizeMake(n, 1, 1)
          threadsPerThreadgroup:MTLSizeMake(group, 1, 1)];
    });
    stream->synchronize(at::mps::SyncType::COMMIT);
  }

  if (!direct) {
    out.copy_(dst);
  }
}

#include <ATen/mps/MPSStream.h>
#include <torch/all.h>

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include "torch-ext/torch_binding.h"

// The metallib is embedded by the build (EMBEDDED_METALLIB_HEADER).
#ifdef EMBEDDED_METALLIB_HEADER
#include EMBEDDED_METALLIB_HEADER
#endif

static inline id<MTLBuffer> buffer_of(const torch::Tensor &t) {
  return __builtin_bit_cast(id<MTLBuffer>, t.storage().data());
}

void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha) {
  TORCH_CHECK(x.device().is_mps() && x.scalar_type() == at::kFloat, "scale_add (Metal): float32 MPS tensors only");
  TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(), "scale_add: out, x and y must have the same shape");
  @autoreleasepool {
    at::mps::MPSStream *stream = at::mps::getCurrentMPSStream();
    id<MTLDevice> device = stream->device();
    NSError *error = nil;
    id<MTLLibrary> library = EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error);
    TORCH_CHECK(library, "scale_add: cannot load the metallib: ", error.localizedDescription.UTF8String);
    id<MTLFunction> fn = [library newFunctionWithName:@"scale_add_float"];
    id<MTLComputePipelineState> pso = [device newComputePipelineStateWithFunction:fn error:&error];
    TORCH_CHECK(pso, error.localizedDescription.UTF8String);
    float a = static_cast<float>(alpha);
    dispatch_sync(stream->queue(), ^{
      id<MTLComputeCommandEncoder> enc = [stream->commandBuffer() computeCommandEncoder];
      [enc setComputePipelineState:pso];
      [enc setBuffer:buffer_of(out) offset:out.storage_offset() * out.element_size() atIndex:0];
      [enc setBuffer:buffer_of(x) offset:x.storage_offset() * x.element_size() atIndex:1];
      [enc setBuffer:buffer_of(y) offset:y.storage_offset() * y.element_size() atIndex:2];
      [enc setBytes:&a length:sizeof(float) atIndex:3];
      NSUInteger n = x.numel();
      [enc dispatchThreads:MTLSizeMake(n, 1, 1)
          threadsPerThreadgroup:MTLSizeMake(std::min<NSUInteger>(pso.maxTotalThreadsPerThreadgroup, n), 1, 1)];
      [enc endEncoding];
      stream->synchronize(at::mps::SyncType::COMMIT);
    });
  }
}

// The Metal glue: checks and row layouts (swiglu_common/torch_args.h), then
// the compute pipeline for the op and dtype, encoded on torch's current MPS
// stream.
#include <torch/all.h>

#include <ATen/mps/MPSStream.h>

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <dlfcn.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "swiglu_common/torch_args.h"
#include "swiglu_metal/params.h"
#include "torch-ext/torch_binding.h"

// The build embeds the compiled shaders (act_and_mul.metal) in the shared
// object and names a generated header that provides
// EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error). Without it, a
// swiglu.metallib beside the shared object is loaded instead.
#ifdef EMBEDDED_METALLIB_HEADER
#include EMBEDDED_METALLIB_HEADER
#endif

namespace swiglu {
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
              "swiglu: cannot locate the loaded shared object");
  NSString *so_path = [NSString stringWithUTF8String:info.dli_fname];
  NSString *lib_path = [[so_path stringByDeletingLastPathComponent]
      stringByAppendingPathComponent:@"swiglu.metallib"];
  id<MTLLibrary> library = [device newLibraryWithURL:[NSURL fileURLWithPath:lib_path]
                                               error:&error];
#endif
  TORCH_CHECK(library != nil, "swiglu: failed to load the Metal library: ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  return library;
}

// Pipelines are built once per kernel name and kept for the life of the
// process.
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
  TORCH_CHECK(function != nil, "swiglu: Metal function ", name,
              " not found in the library (bfloat16 needs Metal 3.1)");
  NSError *error = nil;
  id<MTLComputePipelineState> pipeline =
      [device newComputePipelineStateWithFunction:function error:&error];
  TORCH_CHECK(pipeline != nil, "swiglu: failed to create the pipeline for ", name, ": ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  cache.emplace(name, pipeline);
  return pipeline;
}

// The kernel names of act_and_mul.metal: "<op>_<type>".
std::string kernel_name(Activation act, bool backward, at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return std::string(op_name(act, backward)) + "_float";
    case at::kHalf:
      return std::string(op_name(act, backward)) + "_half";
    case at::kBFloat16:
      return std::string(op_name(act, backward)) + "_bfloat";
    default:
      TORCH_CHECK(false, "swiglu: unsupported dtype ", dtype);
  }
}

// The kernels index with 32 bits.
unsigned int index32(Activation act, bool backward, const Rows &rows, int64_t count,
                     int64_t width) {
  const int64_t last = (count - 1) * rows.stride + width;
  TORCH_CHECK(rows.stride >= 0 && last <= static_cast<int64_t>(UINT32_MAX), op_name(act, backward),
              ": tensors that span 2^32 elements or more are not supported on MPS");
  return static_cast<unsigned int>(rows.stride);
}

// Runs kernel `name` over the (d, rows) grid with `tensors` as buffers 0, 1,
// ... and the parameters after them.
void encode(const std::string &name, const std::vector<const at::Tensor *> &tensors,
            const SwigluParams &params) {
  at::mps::MPSStream *stream = at::mps::getCurrentMPSStream();
  TORCH_CHECK(stream != nullptr, "swiglu: no current MPS stream");
  id<MTLComputePipelineState> pipeline = pipeline_for(stream->device(), name);
  std::vector<std::pair<id<MTLBuffer>, NSUInteger>> buffers;
  for (const at::Tensor *t : tensors) {
    buffers.emplace_back(buffer_of(*t), byte_offset(*t));
  }
  dispatch_sync(stream->queue(), ^() {
    id<MTLComputeCommandEncoder> encoder = stream->commandEncoder();
    [encoder setComputePipelineState:pipeline];
    NSUInteger index = 0;
    for (const auto &buffer : buffers) {
      [encoder setBuffer:buffer.first offset:buffer.second atIndex:index++];
    }
    [encoder setBytes:&params length:sizeof(params) atIndex:index];
    const NSUInteger width =
        MIN(static_cast<NSUInteger>(pipeline.maxTotalThreadsPerThreadgroup),
            static_cast<NSUInteger>(params.d));
    [encoder dispatchThreads:MTLSizeMake(params.d, params.rows, 1)
        threadsPerThreadgroup:MTLSizeMake(width, 1, 1)];
  });
  stream->synchronize(at::mps::SyncType::COMMIT);
}

}  // namespace

void act_and_mul(Activation act, at::Tensor &out, const at::Tensor &input) {
  run_forward(act, c10::DeviceType::MPS, out, input, [&](const ForwardRows &r) {
    TORCH_CHECK(r.rows <= static_cast<int64_t>(UINT32_MAX), op_name(act, false),
                ": too many rows for MPS");
    SwigluParams params{};
    params.rows = static_cast<unsigned int>(r.rows);
    params.d = static_cast<unsigned int>(r.d);
    params.out_stride = index32(act, false, r.out, r.rows, r.d);
    params.in_stride = index32(act, false, r.input, r.rows, 2 * r.d);
    encode(kernel_name(act, false, input.scalar_type()), {&r.out.tensor, &r.input.tensor},
           params);
  });
}

void act_and_mul_backward(Activation act, at::Tensor &grad_input, const at::Tensor &grad_out,
                          const at::Tensor &input) {
  run_backward(act, c10::DeviceType::MPS, grad_input, grad_out, input,
               [&](const BackwardRows &r) {
                 TORCH_CHECK(r.rows <= static_cast<int64_t>(UINT32_MAX), op_name(act, true),
                             ": too many rows for MPS");
                 SwigluParams params{};
                 params.rows = static_cast<unsigned int>(r.rows);
                 params.d = static_cast<unsigned int>(r.d);
                 params.out_stride = index32(act, true, r.grad_input, r.rows, 2 * r.d);
                 params.in_stride = index32(act, true, r.input, r.rows, 2 * r.d);
                 params.grad_out_stride = index32(act, true, r.grad_out, r.rows, r.d);
                 encode(kernel_name(act, true, input.scalar_type()),
                        {&r.grad_input.tensor, &r.grad_out.tensor, &r.input.tensor}, params);
               });
}

}  // namespace swiglu

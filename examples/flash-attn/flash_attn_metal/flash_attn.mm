// Host side of the Metal forward: the shared argument checks
// (flash_attn_common/torch_args.h), the compute pipeline for the dtype and
// head_dim, encoded on torch's current MPS stream. Forward only.
#include <torch/all.h>

#include <ATen/mps/MPSStream.h>

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <dlfcn.h>

#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#include "flash_attn_common/torch_args.h"
#include "flash_attn_metal/metal_params.h"
#include "torch-ext/torch_binding.h"

// The build embeds the compiled shaders (flash_attn.metal) in the shared
// object and names a generated header that provides
// EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error). Without it, a
// flash_attn.metallib beside the shared object is loaded instead.
#ifdef EMBEDDED_METALLIB_HEADER
#include EMBEDDED_METALLIB_HEADER
#endif

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
              "flash_attn: cannot locate the loaded shared object");
  NSString *so_path = [NSString stringWithUTF8String:info.dli_fname];
  NSString *lib_path = [[so_path stringByDeletingLastPathComponent]
      stringByAppendingPathComponent:@"flash_attn.metallib"];
  id<MTLLibrary> library = [device newLibraryWithURL:[NSURL fileURLWithPath:lib_path] error:&error];
#endif
  TORCH_CHECK(library != nil, "flash_attn: failed to load the Metal library: ",
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
  id<MTLFunction> function = [library newFunctionWithName:[NSString stringWithUTF8String:name.c_str()]];
  TORCH_CHECK(function != nil, "flash_attn: Metal function ", name, " not found in the library");
  NSError *error = nil;
  id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function
                                                                                error:&error];
  TORCH_CHECK(pipeline != nil, "flash_attn: failed to create the pipeline for ", name, ": ",
              error ? error.localizedDescription.UTF8String : "unknown error");
  cache.emplace(name, pipeline);
  return pipeline;
}

std::string kernel_name(flash_attn::DType dtype, int head_dim) {
  const bool d64 = head_dim == 64;
  switch (dtype) {
    case flash_attn::DType::kFloat32:
      return d64 ? FLASH_ATTN_METAL_KERNEL(float, 64) : FLASH_ATTN_METAL_KERNEL(float, 128);
    case flash_attn::DType::kFloat16:
      return d64 ? FLASH_ATTN_METAL_KERNEL(half, 64) : FLASH_ATTN_METAL_KERNEL(half, 128);
    case flash_attn::DType::kBFloat16:
      return d64 ? FLASH_ATTN_METAL_KERNEL(bfloat, 64) : FLASH_ATTN_METAL_KERNEL(bfloat, 128);
  }
  TORCH_CHECK(false, "flash_attn: unsupported dtype on MPS");
}

int narrow(int64_t v, const char *what) {
  TORCH_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "flash_attn: ", what, " (", v,
              ") does not fit the Metal kernel's 32-bit indices");
  return static_cast<int>(v);
}

FlashAttnMetalParams metal_params(const flash_attn::FwdParams &p) {
  FlashAttnMetalParams m;
  m.batch = p.batch, m.heads = p.heads, m.heads_k = p.heads_k;
  m.seqlen_q = narrow(p.seqlen_q, "seqlen_q"), m.seqlen_k = narrow(p.seqlen_k, "seqlen_k");
  m.varlen = p.varlen() ? 1 : 0;
  m.causal = p.causal ? 1 : 0;
  m.has_alibi = p.alibi_slopes ? 1 : 0;
  m.alibi_batch_stride = narrow(p.alibi_batch_stride, "alibi batch stride");
  m.softmax_scale = p.softmax_scale;
  m.q_batch_stride = narrow(p.q_batch_stride, "q stride"), m.q_row_stride = narrow(p.q_row_stride, "q stride");
  m.q_head_stride = narrow(p.q_head_stride, "q stride");
  m.k_batch_stride = narrow(p.k_batch_stride, "k stride"), m.k_row_stride = narrow(p.k_row_stride, "k stride");
  m.k_head_stride = narrow(p.k_head_stride, "k stride");
  m.v_batch_stride = narrow(p.v_batch_stride, "v stride"), m.v_row_stride = narrow(p.v_row_stride, "v stride");
  m.v_head_stride = narrow(p.v_head_stride, "v stride");
  m.o_batch_stride = narrow(p.o_batch_stride, "out stride"), m.o_row_stride = narrow(p.o_row_stride, "out stride");
  m.o_head_stride = narrow(p.o_head_stride, "out stride");
  m.lse_batch_stride = narrow(p.lse_batch_stride, "lse stride");
  m.lse_head_stride = narrow(p.lse_head_stride, "lse stride");
  return m;
}

std::tuple<at::Tensor, at::Tensor> forward(const char *op, const at::Tensor &q, const at::Tensor &k,
                                           const at::Tensor &v,
                                           const std::optional<at::Tensor> &cu_seqlens_q,
                                           const std::optional<at::Tensor> &cu_seqlens_k,
                                           int64_t max_seqlen_q, int64_t max_seqlen_k,
                                           const std::optional<at::Tensor> &alibi_slopes,
                                           double softmax_scale, bool causal) {
  flash_attn::Call c = flash_attn::prepare_forward(op, c10::DeviceType::MPS, q, k, v, cu_seqlens_q,
                                                   cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                   alibi_slopes, softmax_scale, causal);
  const flash_attn::FwdParams &p = c.params;
  if (c.out.numel() == 0 || p.batch == 0 || p.seqlen_q == 0) {
    return {c.out, c.lse};
  }
  const FlashAttnMetalParams params = metal_params(p);
  at::mps::MPSStream *stream = at::mps::getCurrentMPSStream();
  TORCH_CHECK(stream != nullptr, "flash_attn: no current MPS stream");
  id<MTLComputePipelineState> pipeline = pipeline_for(stream->device(), kernel_name(p.dtype, p.head_dim));
  // Absent optional inputs are bound to q's buffer; the shader never reads them.
  const at::Tensor &cu_q = p.varlen() ? c.cu_seqlens_q : c.q;
  const at::Tensor &cu_k = p.varlen() ? c.cu_seqlens_k : c.q;
  const at::Tensor &alibi = p.alibi_slopes ? c.alibi : c.q;

  dispatch_sync(stream->queue(), ^() {
    id<MTLComputeCommandEncoder> encoder = stream->commandEncoder();
    [encoder setComputePipelineState:pipeline];
    const at::Tensor *buffers[] = {&c.q, &c.k, &c.v, &c.out, &c.lse, &cu_q, &cu_k, &alibi};
    for (NSUInteger i = 0; i < 8; ++i) {
      [encoder setBuffer:buffer_of(*buffers[i]) offset:byte_offset(*buffers[i]) atIndex:i];
    }
    [encoder setBytes:&params length:sizeof(params) atIndex:8];
    const NSUInteger group = MIN(static_cast<NSUInteger>(pipeline.maxTotalThreadsPerThreadgroup), 64u);
    [encoder dispatchThreads:MTLSizeMake(static_cast<NSUInteger>(p.seqlen_q), static_cast<NSUInteger>(p.heads),
                                         static_cast<NSUInteger>(p.batch))
        threadsPerThreadgroup:MTLSizeMake(group, 1, 1)];
  });
  stream->synchronize(at::mps::SyncType::COMMIT);
  return {c.out, c.lse};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> mha_fwd(const at::Tensor &q, const at::Tensor &k,
                                           const at::Tensor &v,
                                           const std::optional<at::Tensor> &alibi_slopes,
                                           double softmax_scale, bool causal) {
  return forward("flash_attn.fwd", q, k, v, std::nullopt, std::nullopt, 0, 0, alibi_slopes,
                 softmax_scale, causal);
}

std::tuple<at::Tensor, at::Tensor> mha_varlen_fwd(
    const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &cu_seqlens_q,
    const at::Tensor &cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    const std::optional<at::Tensor> &alibi_slopes, double softmax_scale, bool causal) {
  return forward("flash_attn.varlen_fwd", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k, alibi_slopes, softmax_scale, causal);
}

// Shared between flash_attn.metal (Metal Shading Language) and flash_attn.mm
// (Objective-C++): the argument block of the shader and its entry points.
// Plain int/float fields, valid in both languages; the host fills them from
// flash_attn::FwdParams (element strides; tensors are limited to 2^31
// elements on MPS).
#pragma once

struct FlashAttnMetalParams {
  int batch, heads, heads_k;
  int seqlen_q, seqlen_k;  // batched: the lengths; varlen: max_seqlen_q/k
  int varlen;              // cu_seqlens_q/k buffers hold the sequences' offsets
  int causal;              // bottom-right aligned
  int has_alibi, alibi_batch_stride;
  float softmax_scale;
  int q_batch_stride, q_row_stride, q_head_stride;
  int k_batch_stride, k_row_stride, k_head_stride;
  int v_batch_stride, v_row_stride, v_head_stride;
  int o_batch_stride, o_row_stride, o_head_stride;
  int lse_batch_stride, lse_head_stride;
};

// Entry points: flash_attn_fwd_<dtype>_<head_dim>.
#define FLASH_ATTN_METAL_KERNEL(DTYPE, D) "flash_attn_fwd_" #DTYPE "_" #D

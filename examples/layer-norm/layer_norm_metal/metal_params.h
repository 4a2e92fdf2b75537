// Shared between layer_norm.metal (Metal Shading Language) and layer_norm.mm
// (Objective-C++): the argument blocks passed to the shaders, their flag bits
// and the buffer indices. Plain 32-bit fields only, so both languages lay them
// out alike.
#pragma once

// NormParams.flags
#define LN_FLAG_RMS 1u        // RMSNorm (LlamaRMSNorm numerics), else LayerNorm
#define LN_FLAG_WEIGHT 2u     // weight buffer bound
#define LN_FLAG_BIAS 4u       // bias buffer bound
#define LN_FLAG_RESIDUAL 8u   // residual / residual_out bound (forward), or
                              // grad_residual_out bound (backward)

struct NormParams {
  unsigned int rows;
  unsigned int n;
  unsigned int input_stride;         // elements between rows
  unsigned int residual_stride;      // forward: residual; backward: grad_residual_out
  unsigned int residual_out_stride;  // forward: residual_out; backward: grad_out
  unsigned int out_stride;           // forward: out; backward: grad_input
  float eps;
  unsigned int flags;
};

struct SiluParams {
  unsigned int rows;
  unsigned int d;
  unsigned int in_stride;
  unsigned int out_stride;
};

// Buffer indices of the forward kernels.
#define LN_FWD_INPUT 0
#define LN_FWD_RESIDUAL 1
#define LN_FWD_RESIDUAL_OUT 2
#define LN_FWD_OUT 3
#define LN_FWD_WEIGHT 4
#define LN_FWD_BIAS 5
#define LN_FWD_MEAN 6
#define LN_FWD_RSTD 7
#define LN_FWD_PARAMS 8

// Buffer indices of the backward kernels (row kernel: grad_input; column
// kernel: grad_weight / grad_bias).
#define LN_BWD_GRAD_OUT 0
#define LN_BWD_GRAD_RESIDUAL_OUT 1
#define LN_BWD_INPUT 2
#define LN_BWD_MEAN 3
#define LN_BWD_RSTD 4
#define LN_BWD_WEIGHT 5
#define LN_BWD_GRAD_INPUT 6
#define LN_BWD_GRAD_WEIGHT 7
#define LN_BWD_GRAD_BIAS 8
#define LN_BWD_PARAMS 9

// Kernel names are "<kernel>_<type>": norm_fwd, norm_bwd_rows,
// norm_bwd_columns, silu_and_mul; float, half, bfloat (Metal 3.1+).

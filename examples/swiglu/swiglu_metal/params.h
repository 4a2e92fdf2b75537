// Shared between act_and_mul.metal (Metal Shading Language) and act_and_mul.mm
// (Objective-C++): the argument block of the kernels. Indices are 32-bit; the
// host refuses tensors whose rows reach past 2^32 elements.
#pragma once

struct SwigluParams {
  unsigned int rows;
  unsigned int d;
  unsigned int out_stride;       // out, or grad_input for the backward
  unsigned int in_stride;        // input
  unsigned int grad_out_stride;  // grad_out (backward only)
};

// Kernel names are "<op>_<type>", the op as in the binding
// (silu_and_mul_backward, ...), the type float, half or bfloat.

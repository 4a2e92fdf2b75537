// Shared between relu.metal (Metal Shading Language) and relu.mm (Objective-C++):
// the argument block passed to the shader and the names of its entry points.
#pragma once

struct ReluParams {
  unsigned int n;  // number of elements
};

#define RELU_KERNEL_FLOAT "relu_float"
#define RELU_KERNEL_HALF "relu_half"
#define RELU_KERNEL_BFLOAT "relu_bfloat"

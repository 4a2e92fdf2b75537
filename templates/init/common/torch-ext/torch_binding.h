#pragma once

#include <torch/all.h>

// out = x + alpha * y, elementwise; all three tensors share shape, dtype and device.
void scale_add(torch::Tensor &out, const torch::Tensor &x, const torch::Tensor &y, double alpha);

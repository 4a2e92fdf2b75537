#pragma once

#include <torch/all.h>

// out = max(input, 0), element-wise. `out` must have the shape, dtype and
// device of `input`. Every backend source defines this one function; only the
// backend being built is compiled into a variant.
void relu(torch::Tensor &out, torch::Tensor const &input);

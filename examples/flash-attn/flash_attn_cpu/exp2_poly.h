// The polynomial both SIMD policies evaluate for 2^f, f in [-1/2, 1/2]:
// degree-5 minimax coefficients, highest degree first (relative error below
// 2e-7 as fp32 evaluates it, about 1.5 ulp).
#pragma once

namespace flash_attn {
namespace cpu {

constexpr float kExp2Poly[6] = {1.321867225e-3f, 9.671698324e-3f, 5.550893024e-2f,
                                2.402223796e-1f, 6.931468844e-1f, 1.0f};

}  // namespace cpu
}  // namespace flash_attn

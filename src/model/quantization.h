// Dequantisation of the quantised weight formats DeepSeek's checkpoints use, to fp32 on load:
//  - FP8 e4m3 with per-block scales: value = fp8 * scale[row / block_rows][col / block_cols];
//    scales either fp32 ("weight_scale_inv" in DeepSeek-V3's checkpoints, 128 x 128 blocks) or UE8M0
//    (one byte e: 2^(e - 127), DeepSeek-V4.x's 32 x 32 blocks);
//  - FP4 e2m1, two values per byte (the first in the low nibble, as OCP MX and PyTorch's float4_e2m1fn_x2),
//    with one UE8M0 scale per `group` consecutive values of a row (V4.x experts: 32).
#pragma once

#include <cstdint>

#include "src/core/tensor.h"

namespace deepinfer {

enum class ScaleFormat { kF32, kUe8m0 };

float ue8m0_to_float(uint8_t e);
float fp4_e2m1_to_float(uint8_t nibble);

// fp8: [rows, cols] f8e4m3; scale: [ceil(rows / block_rows), ceil(cols / block_cols)] f32 or u8 (UE8M0).
Tensor dequantize_fp8_blocks(const Tensor& fp8, const Tensor& scale, int64_t block_rows, int64_t block_cols);
// packed: [rows, cols / 2] u8; scale: [rows, cols / group] u8 (UE8M0). Returns [rows, cols] f32.
Tensor dequantize_fp4_groups(const Tensor& packed, const Tensor& scale, int64_t group);

}  // namespace deepinfer

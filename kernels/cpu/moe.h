// Routed SwiGLU experts on the CPU: the reference form of kernels/cuda's routed-expert paths (moe_gemv_gate_up
// + moe_gemv_down; moe_route + moe_grouped_experts + moe_unpermute), with their weight layouts:
//   out[t] += sum_k weights[t, k] * down[e] (silu(gate[e] x[t]) * up[e] x[t]),  e = ids[t, k], k in order
// (gate and up clamped first where swiglu_limit > 0: clamp_swiglu, ops.h),
// gate_up [E, 2 * inter, hidden] (each expert's gate rows, then its up rows), down [E, hidden, inter].
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

// ids [n] of logical experts -> places of a store holding fewer (the CUDA form: cuda::remap_expert_ids).
void remap_expert_ids(const int32_t* ids, int64_t n, const int32_t* places, int64_t num_experts, int32_t elsewhere,
                      int32_t* out);

// dst[dst_rows[i]] += src[src_rows[i]] for i < n (the CUDA form: cuda::add_rows_at).
void add_rows_at(const float* src, const int32_t* src_rows, const int32_t* dst_rows, int64_t n, int64_t hidden,
                 float* dst);

// dst[i] = src[src_rows[i]] for i < n (the CUDA form: cuda::gather_rows).
void gather_rows(const float* src, const int32_t* src_rows, int64_t n, int64_t hidden, float* dst);

void moe_experts(const float* x, const int32_t* ids, const float* weights, int64_t tokens, int64_t top_k,
                 int64_t hidden, int64_t inter, const float* gate_up, const float* down, float swiglu_limit, float* out);

}  // namespace deepinfer::cpu

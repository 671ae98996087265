#include "kernels/cuda/router.cuh"

namespace deepinfer::cuda {

namespace {

using Params = cpu::RouterParams;

// One block per token: threads score the experts, thread 0 selects (E and K are small: 256 x 8 at V3).
__global__ void route_kernel(const float* logits, Params p, int32_t* topk_ids, float* topk_weights) {
  extern __shared__ float shared[];
  float* scores = shared;               // [E]
  float* choice = shared + p.num_experts;  // [E]
  const int64_t t = blockIdx.x;
  const float* row = logits + t * p.num_experts;
  const bool softmax = p.scoring == Params::Scoring::kSoftmax;
  __shared__ float max_logit, sum_exp;
  if (softmax && threadIdx.x == 0) {
    float m = row[0];
    for (int64_t e = 1; e < p.num_experts; ++e) m = fmaxf(m, row[e]);
    max_logit = m;
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < p.num_experts; e += blockDim.x)
    scores[e] = softmax ? expf(row[e] - max_logit) : 1.0f / (1.0f + expf(-row[e]));
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (softmax) {
    float s = 0.0f;
    for (int64_t e = 0; e < p.num_experts; ++e) s += scores[e];
    sum_exp = s;
    for (int64_t e = 0; e < p.num_experts; ++e) scores[e] /= sum_exp;
  }
  for (int64_t e = 0; e < p.num_experts; ++e) choice[e] = scores[e] + (p.correction_bias ? p.correction_bias[e] : 0.0f);

  const int64_t per_group = p.num_experts / p.num_groups;
  if (p.group_score != Params::GroupScore::kNone && p.topk_groups < p.num_groups) {
    // Pick topk_groups groups by their score (best expert, or sum of the best two); ties to the lower group.
    uint64_t picked = 0;  // num_groups <= 64 here
    for (int64_t k = 0; k < p.topk_groups; ++k) {
      int64_t best = -1;
      float best_score = 0.0f;
      for (int64_t g = 0; g < p.num_groups; ++g) {
        if (picked >> g & 1) continue;
        float first = -INFINITY, second = -INFINITY;
        for (int64_t i = 0; i < per_group; ++i) {
          const float v = choice[g * per_group + i];
          if (v > first) second = first, first = v;
          else if (v > second) second = v;
        }
        const float score = p.group_score == Params::GroupScore::kMax ? first : first + second;
        if (best < 0 || score > best_score) best = g, best_score = score;
      }
      picked |= uint64_t{1} << best;
    }
    const float masked = softmax ? 0.0f : -INFINITY;
    for (int64_t e = 0; e < p.num_experts; ++e)
      if (!(picked >> (e / per_group) & 1)) choice[e] = masked;
  }
  float sum = 0.0f;
  for (int64_t k = 0; k < p.top_k; ++k) {
    int64_t best = 0;
    for (int64_t e = 1; e < p.num_experts; ++e)
      if (choice[e] > choice[best]) best = e;
    topk_ids[t * p.top_k + k] = static_cast<int32_t>(best);
    topk_weights[t * p.top_k + k] = scores[best];
    sum += scores[best];
    choice[best] = -INFINITY;  // taken
  }
  const float norm = p.normalize ? 1.0f / (sum + 1e-20f) : 1.0f;
  for (int64_t k = 0; k < p.top_k; ++k) topk_weights[t * p.top_k + k] *= norm * p.scaling;
}

}  // namespace

void route_topk(const float* logits, int64_t num_tokens, const cpu::RouterParams& params, int32_t* topk_ids,
                float* topk_weights, cudaStream_t stream) {
  if (num_tokens == 0) return;
  const size_t shared = 2 * static_cast<size_t>(params.num_experts) * sizeof(float);
  route_kernel<<<static_cast<unsigned>(num_tokens), 128, shared, stream>>>(logits, params, topk_ids, topk_weights);
}

}  // namespace deepinfer::cuda

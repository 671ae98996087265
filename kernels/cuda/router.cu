#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/router.cuh"

namespace deepinfer::cuda {

namespace {

using Params = cpu::RouterParams;

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxExpertsPerLane = static_cast<int>(kRouteMaxExperts / 32);

// (value, index) of the larger value across the warp; ties go to the lower index (the CPU's first maximum).
__device__ __forceinline__ void warp_argmax(float& value, int& index) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_value = __shfl_xor_sync(0xffffffffu, value, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, index, offset);
    if (other_value > value || (other_value == value && other_index < index)) value = other_value, index = other_index;
  }
}

// One warp per token: the lanes score the experts (lane l takes experts l, l + 32, ...), then every selection
// (groups, then experts) is a warp-wide argmax; the serial thread-0 loops this replaced cost ~10 us a layer.
// A lane loads its logits (and biases) in one round trip, and lane k keeps the k-th pick for the final write.
__global__ void route_kernel(const float* logits, int64_t num_tokens, Params p, int32_t* topk_ids,
                             float* topk_weights) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ float shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int E = static_cast<int>(p.num_experts);
  float* scores = shared + warp * 2 * E;  // [E]
  float* choice = scores + E;             // [E]
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= num_tokens) return;
  const float* row = logits + t * E;
  const bool softmax = p.scoring == Params::Scoring::kSoftmax;
  float logit[kMaxExpertsPerLane], bias[kMaxExpertsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxExpertsPerLane; ++j) {
    const int e = lane + 32 * j;
    logit[j] = e < E ? row[e] / p.temperature : -INFINITY;
    bias[j] = e < E && p.correction_bias != nullptr ? p.correction_bias[e] : 0.0f;
  }
  float max_logit = -INFINITY;
  if (softmax) {
#pragma unroll
    for (int j = 0; j < kMaxExpertsPerLane; ++j) max_logit = fmaxf(max_logit, logit[j]);
    max_logit = warp_max(max_logit);
  }
  float total = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxExpertsPerLane; ++j) {
    if (lane + 32 * j >= E) continue;
    const float x = logit[j];  // now the score:
    logit[j] = softmax                                   ? expf(x - max_logit)
               : p.scoring == Params::Scoring::kSigmoid ? 1.0f / (1.0f + expf(-x))
                                                        : sqrtf(x > 20.0f ? x : log1pf(expf(x)));  // sqrt(softplus)
    total += logit[j];
  }
  if (softmax) total = warp_sum(total);
#pragma unroll
  for (int j = 0; j < kMaxExpertsPerLane; ++j) {
    const int e = lane + 32 * j;
    if (e >= E) continue;
    if (softmax) logit[j] /= total;
    scores[e] = logit[j];
    choice[e] = logit[j] + bias[j];
  }
  __syncwarp();

  const int per_group = static_cast<int>(p.num_experts / p.num_groups);
  if (p.group_score != Params::GroupScore::kNone && p.topk_groups < p.num_groups) {
    // Lane g scores group g (best expert, or sum of the best two); topk_groups argmaxes pick the groups.
    float group_score = -INFINITY;
    if (lane < p.num_groups) {
      float first = -INFINITY, second = -INFINITY;
      for (int i = 0; i < per_group; ++i) {
        const float v = choice[lane * per_group + i];
        if (v > first) second = first, first = v;
        else if (v > second) second = v;
      }
      group_score = p.group_score == Params::GroupScore::kMax ? first : first + second;
    }
    uint32_t picked = 0;  // num_groups <= 32 (the model checks): one lane a group
    for (int64_t k = 0; k < p.topk_groups; ++k) {
      float value = lane < p.num_groups && !(picked >> lane & 1) ? group_score : -INFINITY;
      int index = lane < p.num_groups && !(picked >> lane & 1) ? lane : 1 << 30;
      warp_argmax(value, index);
      picked |= 1u << index;
    }
    const float masked = softmax ? 0.0f : -INFINITY;
    __syncwarp();  // the group scores above read other lanes' entries before they are masked
    for (int e = lane; e < E; e += 32)
      if (!(picked >> (e / per_group) & 1)) choice[e] = masked;
    __syncwarp();
  }
  float sum = 0.0f, my_score = 0.0f;
  int my_index = 0;
  for (int k = 0; k < static_cast<int>(p.top_k); ++k) {
    float value = -INFINITY;
    int index = 1 << 30;
    for (int e = lane; e < E; e += 32)
      if (choice[e] > value || index == 1 << 30) value = choice[e], index = e;
    warp_argmax(value, index);
    const float score = scores[index];
    sum += score;
    if (lane == k) my_score = score, my_index = index;
    __syncwarp();  // every lane's reads of choice[] above are done before one lane marks the pick taken
    if (lane == index % 32) choice[index] = -INFINITY;  // taken
    __syncwarp();
  }
  const float norm = p.normalize ? 1.0f / (sum + 1e-20f) : 1.0f;
  if (lane < p.top_k) {
    topk_ids[t * p.top_k + lane] = my_index;
    topk_weights[t * p.top_k + lane] = my_score * (norm * p.scaling);
  }
}

}  // namespace

void route_topk(const float* logits, int64_t num_tokens, const cpu::RouterParams& params, int32_t* topk_ids,
                float* topk_weights, cudaStream_t stream) {
  // Preconditions (the model checks them): at most kRouteMaxExperts experts, top_k <= 32.
  if (num_tokens == 0 || params.num_experts > kRouteMaxExperts || params.top_k > 32) return;
  const size_t shared = kWarpsPerBlock * 2 * static_cast<size_t>(params.num_experts) * sizeof(float);
  const auto blocks = static_cast<unsigned>((num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_dependent(route_kernel, blocks, kWarpsPerBlock * 32, shared, stream, logits, num_tokens, params, topk_ids,
                   topk_weights);
}

}  // namespace deepinfer::cuda

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_transposed.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mla_prepare.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kLatentPerThread = 4;  // lora <= 1024
constexpr int kRopePerThread = 4;    // rotary pairs a thread loads before it stores any (a batch)

struct PrepareArgs {
  const __nv_bfloat16* kv;
  const __nv_bfloat16* norm_weight;
  float eps;
  __nv_bfloat16* q;
  const int32_t* positions;
  const float* inv_freq;
  float attention_factor;
  bool interleaved;
  const int64_t* slots;
  __nv_bfloat16* cache;
  __nv_bfloat16* q_latent;
  MlaPrepareShape s;
};

// Token t's work, one block of kThreads. Every load of a phase is issued before its stores (the query tails
// rotate in place, so the compiler would otherwise wait out one memory latency per element): one round trip for
// the latent norm and one per batch of rotary pairs, in the same order of arithmetic as the kernels it replaces.
__device__ __forceinline__ void prepare_token(const PrepareArgs& a, int64_t t) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const MlaPrepareShape& s = a.s;
  const __nv_bfloat16 *kv = a.kv, *norm_weight = a.norm_weight;
  __nv_bfloat16 *q = a.q, *q_latent = a.q_latent, *cache = a.cache;
  const int64_t entry = s.lora + s.rope, qk = s.nope + s.rope, half = s.rope / 2;
  const float eps = a.eps, attention_factor = a.attention_factor;
  const bool interleaved = a.interleaved;
  const float* inv_freq = a.inv_freq;
  const int64_t* slots = a.slots;
  const int32_t* positions = a.positions;
  const __nv_bfloat16* in = kv + t * s.kv_stride;
  __nv_bfloat16* out = cache + slots[t] * entry;
  const float position = static_cast<float>(positions[t]);

  float latent[kLatentPerThread], gain[kLatentPerThread];
#pragma unroll
  for (int j = 0; j < kLatentPerThread; ++j) {
    const int64_t i = threadIdx.x + j * kThreads;
    latent[j] = i < s.lora ? to_float(in[i]) : 0.0f;
    gain[j] = i < s.lora ? to_float(norm_weight[i]) : 0.0f;
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kLatentPerThread; ++j) sum_sq += latent[j] * latent[j];  // zeros past lora add nothing
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(s.lora) + eps);
#pragma unroll
  for (int j = 0; j < kLatentPerThread; ++j) {
    const int64_t i = threadIdx.x + j * kThreads;
    if (i < s.lora) out[i] = to_bf16(latent[j] * inv_rms * gain[j]);
  }

  // Rotary pair (h, i): h = -1 is the cache entry's rotary part, h >= 0 query head h (written to q in place and
  // to q_latent's tail).
  const int64_t pairs = (s.heads + 1) * half;
  for (int64_t first = 0; first < pairs; first += kThreads * kRopePerThread) {
    float x0[kRopePerThread], x1[kRopePerThread], freq[kRopePerThread];
#pragma unroll
    for (int j = 0; j < kRopePerThread; ++j) {
      const int64_t idx = first + threadIdx.x + j * kThreads;
      if (idx >= pairs) continue;
      const int64_t h = idx / half - 1, i = idx % half;
      const __nv_bfloat16* src = h < 0 ? in + s.lora : q + t * s.q_stride + h * qk + s.nope;
      x0[j] = to_float(src[interleaved ? 2 * i : i]);
      x1[j] = to_float(src[interleaved ? 2 * i + 1 : i + half]);
      freq[j] = inv_freq[i];
    }
#pragma unroll
    for (int j = 0; j < kRopePerThread; ++j) {
      const int64_t idx = first + threadIdx.x + j * kThreads;
      if (idx >= pairs) continue;
      const int64_t h = idx / half - 1, i = idx % half;
      float sn, cs;
      sincosf(position * freq[j], &sn, &cs);
      cs *= attention_factor;
      sn *= attention_factor;
      __nv_bfloat16 y0, y1;
      rotate_pair(x0[j], x1[j], cs, sn, y0, y1);
      const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
      __nv_bfloat16* dst = h < 0 ? out + s.lora : q + t * s.q_stride + h * qk + s.nope;
      dst[a] = y0;
      dst[b] = y1;
      if (h >= 0 && q_latent != nullptr) {
        __nv_bfloat16* tail = q_latent + (t * s.heads + h) * entry + s.lora;
        tail[a] = y0;
        tail[b] = y1;
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) mla_prepare_kernel(PrepareArgs args) {
  prepare_token(args, blockIdx.x);
}

// Blocks [0, tokens) prepare a token each; the rest compute the absorbed queries' latent part, block
// (column block c, head h) at tokens + h * column_blocks + c. Neither reads what the other writes (q's nope part
// and the W_uk rows, against q's rotary tail, the cache and q_latent's tail).
template <int kRows>
__global__ void __launch_bounds__(kThreads) mla_prepare_absorb_kernel(PrepareArgs args, const __nv_bfloat16* w_uk,
                                                                       GemvLayout layout, int column_blocks) {
  static_assert(kThreads == kGemvTransposedThreads, "one block size for both kinds of block");
  const int tokens = static_cast<int>(args.s.tokens);
  if (static_cast<int>(blockIdx.x) < tokens) return prepare_token(args, blockIdx.x);
  const int block = static_cast<int>(blockIdx.x) - tokens;
  gemv_transposed_block<kRows>(args.q, w_uk, args.q_latent, static_cast<int>(args.s.nope),
                               static_cast<int>(args.s.lora), layout, block % column_blocks, block / column_blocks);
}

}  // namespace

void mla_prepare(const __nv_bfloat16* kv, const __nv_bfloat16* kv_norm_weight, float eps, __nv_bfloat16* q,
                 const int32_t* positions, const float* inv_freq, float attention_factor, bool interleaved,
                 const int64_t* slots, __nv_bfloat16* cache, __nv_bfloat16* q_latent, MlaPrepareShape shape,
                 cudaStream_t stream) {
  if (shape.tokens == 0 || shape.lora > kThreads * kLatentPerThread) return;  // precondition: lora <= 1024
  const PrepareArgs args{kv,    kv_norm_weight, eps,   q,        positions, inv_freq, attention_factor,
                        interleaved, slots,   cache, q_latent, shape};
  launch_dependent(mla_prepare_kernel, static_cast<unsigned>(shape.tokens), kThreads, 0, stream, args);
}

void mla_prepare_absorb(const __nv_bfloat16* kv, const __nv_bfloat16* kv_norm_weight, float eps, __nv_bfloat16* q,
                        const int32_t* positions, const float* inv_freq, float attention_factor, bool interleaved,
                        const int64_t* slots, __nv_bfloat16* cache, __nv_bfloat16* q_latent, MlaPrepareShape shape,
                        const __nv_bfloat16* w_uk, int64_t w_uk_head_stride, cudaStream_t stream) {
  if (shape.tokens == 0 || shape.lora > kThreads * kLatentPerThread || shape.tokens > kLinearGemvMaxRows) return;
  const PrepareArgs args{kv,    kv_norm_weight, eps,   q,        positions, inv_freq, attention_factor,
                        interleaved, slots,   cache, q_latent, shape};
  const int64_t entry = shape.lora + shape.rope, column_blocks = gemv_transposed_column_blocks(shape.lora);
  const GemvLayout layout{shape.q_stride, shape.nope + shape.rope, w_uk_head_stride, shape.heads * entry, entry,
                          shape.lora};
  const auto blocks = static_cast<unsigned>(shape.tokens + shape.heads * column_blocks);
  with_gemv_row_count(shape.tokens, [&](auto rows) {
    launch_dependent(mla_prepare_absorb_kernel<decltype(rows)::value>, blocks, kThreads, 0, stream, args, w_uk, layout,
                     static_cast<int>(column_blocks));
  });
}

}  // namespace deepinfer::cuda

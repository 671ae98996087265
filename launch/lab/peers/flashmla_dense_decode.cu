// FlashMLA's SM90 dense decode (github.com/deepseek-ai/FlashMLA: its scheduler metadata, split-KV kernel and combine)
// timed at attention_bench's dense points, for the same device call: 128 (or HEADS) query heads over one latent KV
// head, d 576, dv 512, 64-token pages, every sequence CONTEXT long, bf16. Its parameters are filled as its Python API
// (csrc/api/dense_decode.h) fills them for one query token a sequence. Prints one JSON line a point, as
// attention_bench does: the median of 30 calls (metadata + kernel + combine) after 5.
//
// Built outside the repository against FlashMLA's sources by launch/lab/peers/build_flashmla_peer.sh.
//   flashmla_dense_decode                         the 128-head points of attention_bench (batch 1-256, 1K/4K/32K)
//   flashmla_dense_decode HEADS BATCH CONTEXT     one point
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "params.h"
#include "sm90/decode/dense/splitkv_mla.h"
#include "smxx/decode/combine/combine.h"
#include "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h"

#define PEER_CHECK(call)                                                                                    \
  do {                                                                                                      \
    cudaError_t status_ = (call);                                                                           \
    if (status_ != cudaSuccess) {                                                                           \
      std::fprintf(stderr, "flashmla_dense_decode: %s: %s\n", #call, cudaGetErrorString(status_));          \
      std::exit(1);                                                                                         \
    }                                                                                                       \
  } while (0)

namespace {

constexpr int kD = 576, kDv = 512, kPage = 64;

template <class T>
T* device_alloc(size_t count) {
  T* p = nullptr;
  PEER_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  return p;
}

// bf16 values in [-1, 1) from a hash of the index (the inputs' values do not change the kernels' time).
__global__ void fill_bf16(uint16_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    const float v = static_cast<float>(h >> 8) / 8388608.0f - 1.0f;
    x[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
  }
}

void point(int heads, int batch, int context, int num_sms) {
  const int blocks_per_seq = (context + kPage - 1) / kPage, num_blocks = batch * blocks_per_seq;
  const int q_seq_per_hk = heads;  // one query token a sequence, one KV head
  auto* q = device_alloc<uint16_t>(static_cast<size_t>(batch) * heads * kD);
  auto* kcache = device_alloc<uint16_t>(static_cast<size_t>(num_blocks) * kPage * kD);
  auto* out = device_alloc<uint16_t>(static_cast<size_t>(batch) * heads * kDv);
  auto* lse = device_alloc<float>(static_cast<size_t>(batch) * heads);
  fill_bf16<<<1024, 256>>>(q, static_cast<size_t>(batch) * heads * kD, 1);
  fill_bf16<<<1024, 256>>>(kcache, static_cast<size_t>(num_blocks) * kPage * kD, 2);
  std::vector<int> table(static_cast<size_t>(num_blocks)), lens(batch, context);
  std::iota(table.begin(), table.end(), 0);
  auto* d_table = device_alloc<int>(table.size());
  auto* d_lens = device_alloc<int>(lens.size());
  PEER_CHECK(cudaMemcpy(d_table, table.data(), table.size() * sizeof(int), cudaMemcpyHostToDevice));
  PEER_CHECK(cudaMemcpy(d_lens, lens.data(), lens.size() * sizeof(int), cudaMemcpyHostToDevice));

  // As dense_attn_decode_interface: num_sm_parts = SMs / KV heads / ceil(query rows a KV head / 64).
  const int num_sm_parts = std::max(num_sms / ((q_seq_per_hk + 63) / 64), 1);
  auto* meta = device_alloc<DecodingSchedMeta>(num_sm_parts);
  auto* num_splits = device_alloc<int>(batch + 1);
  const int total_splits = batch + num_sm_parts;
  auto* lse_accum = device_alloc<float>(static_cast<size_t>(total_splits) * q_seq_per_hk);
  auto* o_accum = device_alloc<float>(static_cast<size_t>(total_splits) * q_seq_per_hk * kDv);
  cudaStream_t stream = nullptr;

  GetDecodeSchedMetaParams sched{batch, 1, kPage, 5, -1, -1, nullptr, nullptr, d_lens, meta, num_splits,
                                 num_sm_parts, stream};
  DenseAttnDecodeParams p{};
  p.b = batch;
  p.s_q = 1;
  p.q_seq_per_hk = q_seq_per_hk;
  p.seqlens_k_ptr = d_lens;
  p.h_q = heads;
  p.h_k = 1;
  p.num_blocks = num_blocks;
  p.q_head_per_hk = heads;
  p.is_causal = false;  // one query token
  p.d = kD;
  p.d_v = kDv;
  p.scale_softmax = 1.0f / std::sqrt(static_cast<float>(kD));
  p.scale_softmax_log2 = p.scale_softmax * static_cast<float>(M_LOG2E);
  p.q_ptr = q;
  p.k_ptr = kcache;
  p.o_ptr = out;
  p.softmax_lse_ptr = lse;
  // q viewed [batch, q_seq_per_hk, 1, d], kcache [blocks, 64, 1, d], out [batch, 1, q_seq_per_hk, dv] (strides in
  // elements, as the API reads them from its tensors).
  p.q_batch_stride = static_cast<int64_t>(q_seq_per_hk) * kD;
  p.q_row_stride = kD;
  p.q_head_stride = kD;
  p.k_batch_stride = static_cast<int64_t>(kPage) * kD;
  p.k_row_stride = kD;
  p.k_head_stride = kD;
  p.o_batch_stride = static_cast<int64_t>(q_seq_per_hk) * kDv;
  p.o_row_stride = kDv;
  p.o_head_stride = static_cast<int64_t>(q_seq_per_hk) * kDv;
  p.block_table = d_table;
  p.block_table_batch_stride = blocks_per_seq;
  p.page_block_size = kPage;
  p.tile_scheduler_metadata_ptr = meta;
  p.num_sm_parts = num_sm_parts;
  p.num_splits_ptr = num_splits;
  p.total_num_splits = total_splits;
  p.softmax_lseaccum_ptr = lse_accum;
  p.oaccum_ptr = o_accum;
  p.stream = stream;
  CombineParams combine{batch, 1, heads, kDv, lse, out, q_seq_per_hk, heads, heads * kDv, heads * kDv, kDv,
                        lse_accum, o_accum, q_seq_per_hk, heads, heads * kDv, heads * kDv, kDv, meta, num_splits,
                        num_sm_parts, nullptr, stream};

  const auto call = [&] {
    smxx::decode::run_get_decoding_sched_meta_kernel(sched);
    sm90::run_flash_splitkv_mla_kernel<cutlass::bfloat16_t>(p);
    smxx::decode::run_flash_mla_combine_kernel<cutlass::bfloat16_t>(combine);
  };
  cudaEvent_t start, stop;
  PEER_CHECK(cudaEventCreate(&start));
  PEER_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 5; ++i) call();
  std::vector<float> ms(30);
  for (float& m : ms) {
    PEER_CHECK(cudaEventRecord(start, stream));
    call();
    PEER_CHECK(cudaEventRecord(stop, stream));
    PEER_CHECK(cudaEventSynchronize(stop));
    PEER_CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  PEER_CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double flops = 2.0 * batch * heads * static_cast<double>(context) * (kD + kDv);
  std::printf("{\"impl\": \"flashmla\", \"kind\": \"dense\", \"kernel\": \"flashmla\", \"heads\": %d, \"batch\": %d, "
              "\"context\": %d, \"num_sm_parts\": %d, \"us\": %.2f, \"tflop_s\": %.1f}\n",
              heads, batch, context, num_sm_parts, median * 1e3, flops / (median * 1e-3) / 1e12);
  std::fflush(stdout);
  for (void* x : {static_cast<void*>(q), static_cast<void*>(kcache), static_cast<void*>(out), static_cast<void*>(lse),
                  static_cast<void*>(d_table), static_cast<void*>(d_lens), static_cast<void*>(meta),
                  static_cast<void*>(num_splits), static_cast<void*>(lse_accum), static_cast<void*>(o_accum)})
    PEER_CHECK(cudaFree(x));
  PEER_CHECK(cudaEventDestroy(start));
  PEER_CHECK(cudaEventDestroy(stop));
}

}  // namespace

int main(int argc, char** argv) {
  int num_sms = 0;
  PEER_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
  if (argc == 4) {
    point(std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), num_sms);
    return 0;
  }
  for (int context : {1024, 4096, 32768})
    for (int batch : {1, 8, 64, 128, 256}) {
      if (static_cast<double>(batch) * context > 4096.0 * 256) continue;  // as attention_bench
      point(128, batch, context, num_sms);
    }
  return 0;
}

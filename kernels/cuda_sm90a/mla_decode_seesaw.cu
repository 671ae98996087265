// MLA decode attention for 64 heads a block with the two warpgroups on alternate tiles (kernels/cuda/
// mla_decode_seesaw.cuh). Built for sm_90a only (kernels/CMakeLists.txt): wgmma exists on no other target.
#include "kernels/cuda/mla_decode_seesaw.cuh"

#include <utility>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/sm90a.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda_sm90a/mla_decode_split.cuh"
#include "kernels/cuda_sm90a/wgmma.cuh"

namespace deepinfer::cuda {

namespace {

using namespace wgmma;

constexpr int kKeys = 64;   // a tile: one cache block's 64 entries
using mla_decode::kHeads, mla_decode::kLatent, mla_decode::kHalfLatent;  // 64 heads a block, latent 512
constexpr int kRope = 64, kDim = kLatent + kRope;
constexpr int kUnits = kDim / 8;                       // 16-byte pieces of an entry
constexpr int kAtoms = kDim / 64;                      // 64-column swizzle atoms of an entry: 8 latent, 1 rope
constexpr int kTileBytes = kAtoms * kAtomBytes;        // Q, or one tile of entries
constexpr int kPAtom = kAtoms - 1;                     // a tile's rope atom, which holds its P once scored
// Two warpgroups compute; a third issues the copies. Registers: 65,536 over 12 warps would be 168 a thread (with
// spills); the copy warpgroup gives all but 40 back and the two others take 232 (setmaxnreg), as CUTLASS's Hopper
// kernels do.
constexpr int kConsumers = 256, kThreads = kConsumers + 128;
constexpr int kConsumerRegisters = 232, kCopyRegisters = 40;
// Shared memory: Q | tile buffer 0 | tile buffer 1 | mbarriers loaded[2][9], released[2] | row maxima [2][64] |
// row sums [2][64], after up to 1,024 bytes that bring Q to a 1,024-byte boundary (TMA's 128-byte swizzle).
constexpr int kBarrierOffset = 3 * kTileBytes;
constexpr int kMaxOffset = kBarrierOffset + (2 * kAtoms + 2) * 8;
constexpr int kSumOffset = kMaxOffset + 2 * kHeads * 4;
constexpr size_t kSharedBytes = kSumOffset + 2 * kHeads * 4 + 1024;
static_assert(kSharedBytes <= 227 * 1024, "one block an SM");
// The cache as the copies see it: rows of kDim bf16, at most kMapRows of them (2^29 entries, 8.4M blocks of 64; the
// bound keeps the map's unused plane stride under the 2^40 bytes TMA takes).
constexpr int64_t kMapRows = int64_t{1} << 29;

// Named barriers (0 is __syncthreads): tile A's maximum and P written (warpgroup 0 arrives, 1 waits), tile B's
// likewise (1 arrives, 0 waits), the two warpgroups' sums met, and each warpgroup's own (a partial tile's rows zeroed).
enum Barrier : int { kAReady = 1, kBReady = 2, kSumsMet = 3, kOwnWarpgroup = 4 };
__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
template <int kRegisters>
__device__ __forceinline__ void take_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void give_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// One block per (64-head group, KV split, sequence); the split's 64-key tiles go in pairs (A, B), A in buffer 0, B
// in buffer 1, brought by TMA a 64-column atom at a time (the scores start on the first atom to land). Warpgroup w
// owns latent columns [256 w, 256 w + 256) of the output and scores tile w of each pair (S = Q K^T, m64n64k16 over
// the 576 columns):
//   warpgroup 0: S_A; m_A = max(m, rowmax S_A), P_A = exp2(S_A - m_A); publishes m_A and P_A (into A's rope atom,
//                which S_A no longer needs); O_L = O_L c(m -> m_A) + P_A V_A,L (P from registers); then, once B is
//                published, O_L = O_L c(m_A -> m_B) + P_B V_B,L (P_B from shared memory).
//   warpgroup 1: S_B (while warpgroup 0 scores A); once A is published, O_R = O_R c(m -> m_A) + P_A V_A,R while it
//                computes m_B = max(m_A, rowmax S_B) and P_B and publishes them; then O_R = O_R c(m_A -> m_B) +
//                P_B V_B,R (P from registers).
// So one warpgroup's softmax runs while the other's MMAs do (FlashMLA's "seesaw"), instead of both waiting on each
// tile's shared maximum (mla_decode_wgmma.cu). Both keep the same running maximum; each its own sum (over the tiles
// it scored), added at the end. A buffer is loaded again once all 256 threads have released it (mbarrier); the
// copy thread waits for that. Partials as mla_decode.cu's.
__global__ void __launch_bounds__(kThreads, 1)
    decode_seesaw_kernel(const __grid_constant__ CUtensorMap cache_map, const __nv_bfloat16* q,
                         const int32_t* block_table, int max_blocks_per_seq, const int32_t* seq_lens, int heads,
                         float scale, int num_splits, int keys_per_split, float* partial, __nv_bfloat16* out) {
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = aligned_shared(shared_raw);
  const uint32_t q_base = shared_address(shared);
  auto* loaded = reinterpret_cast<uint64_t*>(shared + kBarrierOffset);  // [buffer][atom]: the atom landed
  uint64_t* released = loaded + 2 * kAtoms;                              // [buffer]: every thread done with it
  auto* max_after = reinterpret_cast<float*>(shared + kMaxOffset);      // [tile of the pair][head]
  auto* row_sum = reinterpret_cast<float*>(shared + kSumOffset);        // [warpgroup][head]

  const int head0 = blockIdx.x * kHeads, split = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int len = seq_lens[b];
  // Splits start on a cache block, so a tile is one block's entries (keys_per_split a multiple of 64).
  const int per_split =
      keys_per_split > 0 ? keys_per_split : ((len + num_splits - 1) / num_splits + kKeys - 1) / kKeys * kKeys;
  const int begin = split * per_split, end = min(len, begin + per_split);
  const int num_tiles = end > begin ? (end - begin + kKeys - 1) / kKeys : 0;
  const int32_t* table = block_table + static_cast<int64_t>(b) * max_blocks_per_seq;

  if (tid == kConsumers) {
    for (int i = 0; i < 2 * kAtoms; ++i) mbarrier_init(&loaded[i], 1);
    for (int i = 0; i < 2; ++i) mbarrier_init(&released[i], kConsumers);
    fence_barrier_init();
  }
  if (tid < kConsumers) {  // Q (rows past the heads zero)
    for (int i = tid; i < kHeads * kUnits; i += kConsumers) {
      const int row = i / kUnits, unit = i % kUnits;
      const bool valid = head0 + row < heads;
      const __nv_bfloat16* src = q + (static_cast<int64_t>(b) * heads + (valid ? head0 + row : 0)) * kDim + 8 * unit;
      cp_async_16(shared + swizzled(row, unit), src, valid);
    }
    cp_async_commit();
  }
  __syncthreads();  // the barriers initialised (the only block-wide barrier: the copy warpgroup leaves below)

  // The warpgroup's index as a value the compiler knows is the same across the warp (a shuffle's), so that the
  // MMAs under branches on it are not serialised as if the warpgroup could diverge (as CUTLASS does).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (wg == 2) {  // the copy warpgroup: tile t into buffer t % 2 once its previous tile is released, by one thread
    give_registers<kCopyRegisters>();
    if (tid != kConsumers) return;
    for (int t = 0; t < num_tiles; ++t) {
      const int buffer = t % 2, use = t / 2;
      if (use > 0) mbarrier_wait_silent(&released[buffer], (use - 1) & 1);
      const int block = table[(begin + t * kKeys) / kMlaBlockSize];
      unsigned char* dst = shared + (1 + buffer) * kTileBytes;
      for (int a = 0; a < kAtoms; ++a) {
        mbarrier_arrive_expect_tx(&loaded[buffer * kAtoms + a], kAtomBytes);
        tma_load_3d(dst + a * kAtomBytes, &cache_map, a * 64, block * kKeys, 0, &loaded[buffer * kAtoms + a]);
      }
    }
    return;
  }

  take_registers<kConsumerRegisters>();
  const int warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int rows[2] = {16 * warp + g, 16 * warp + g + 8};  // this thread's heads in the block (accumulator rows)
  cp_async_wait<0>();
  fence_shared_for_mma();
  bar_sync(kSumsMet, kConsumers);  // Q in shared memory, visible to both warpgroups' MMAs

  float o[kHalfLatent / 2] = {};  // 64 x 256 fp32: columns 256 wg + 8 n + 2 t (+1), rows above
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // log2 units; l over this warpgroup's tiles
  const float scale_log2 = scale * kLog2e;
  const auto buffer_base = [&](int buffer) { return q_base + (1 + buffer) * kTileBytes; };
  const uint32_t own_columns = wg * (kHalfLatent / 64) * kAtomBytes;  // this warpgroup's V atoms in a tile

  // O += P V over one tile's 64 keys, P from shared memory (the tile's rope atom) or from registers.
  const auto accumulate_shared = [&](uint32_t tile) {
    fence_operands(o);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      mma_ss<gmma::MMA_64x256x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::MN>>(
          k_major(tile + kPAtom * kAtomBytes + kk * 32), mn_major(tile + own_columns + kk * 16 * 128), o,
          gmma::ScaleOut::One, std::make_index_sequence<kHalfLatent / 2>{});
    cute::warpgroup_commit_batch();
  };
  const auto accumulate_registers = [&](uint32_t tile, const uint32_t (&p)[kKeys / 16][4]) {
    fence_operands(o);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      mma_rs<gmma::MMA_64x256x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::MN>>(
          p[kk], mn_major(tile + own_columns + kk * 16 * 128), o, std::make_index_sequence<kHalfLatent / 2>{});
    cute::warpgroup_commit_batch();
  };
  const auto wait_all = [&] {
    cute::warpgroup_wait<0>();
    fence_operands(o);
  };

  for (int pair = 0; 2 * pair < num_tiles; ++pair) {
    const int mine = 2 * pair + wg;  // the tile this warpgroup scores
    const bool has_b = 2 * pair + 1 < num_tiles;
    if (mine >= num_tiles) {  // warpgroup 1 in a last pair without B: A's columns only
      bar_sync(kAReady, kConsumers);
      float correction[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_a = max_after[rows[r]];
        correction[r] = exp2f(m_run[r] - m_a);
        l_run[r] *= correction[r];
        m_run[r] = m_a;
      }
      rescale_rows(o, correction);
      accumulate_shared(buffer_base(0));
      wait_all();
      break;
    }
    const uint32_t tile = buffer_base(wg);
    unsigned char* tile_bytes = shared + (1 + wg) * kTileBytes;

    // S = Q K^T over the tile's atoms as they land: a batch of MMAs an atom.
    float s[kKeys / 2] = {};  // 64 x 64 fp32: keys 8 n + 2 t (+1)
    fence_operands(s);
#pragma unroll
    for (int a = 0; a < kAtoms; ++a) {
      mbarrier_wait_silent(&loaded[wg * kAtoms + a], pair & 1);
      cute::warpgroup_arrive();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t step = a * kAtomBytes + j * 32;
        mma_ss<gmma::MMA_64x64x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>>(
            k_major(q_base + step), k_major(tile + step), s,
            a == 0 && j == 0 ? gmma::ScaleOut::Zero : gmma::ScaleOut::One, std::make_index_sequence<kKeys / 2>{});
      }
      cute::warpgroup_commit_batch();
    }
    cute::warpgroup_wait<0>();
    fence_operands(s);
    fence_operands(o);

    // A partial last tile: the block's entries past the sequence (never written, or another sequence's) become
    // zeros in V's columns, which P's zeros then weigh exactly (a NaN there would not vanish); their scores are
    // masked below.
    const int tile_len = min(kKeys, end - begin - mine * kKeys);
    if (tile_len < kKeys) {
      for (int i = tid % 128; i < (kKeys - tile_len) * (kLatent / 8); i += 128) {
        const int row = tile_len + i / (kLatent / 8), unit = i % (kLatent / 8);
        *reinterpret_cast<uint4*>(tile_bytes + swizzled(row, unit)) = make_uint4(0, 0, 0, 0);
      }
      fence_shared_for_mma();
      bar_sync(kOwnWarpgroup + wg, 128);
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) {
      const int key = 8 * (i / 4) + 2 * t + (i % 2);
      s[i] = key < tile_len ? s[i] * scale_log2 : -INFINITY;
      mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], s[i]);
    }
    // P against `reference` (its maximum: m_A for warpgroup 0, m_B for 1), its row sums into l_run (first scaled by
    // c(m_run -> reference), which it returns), and P published: bf16 into the tile's rope atom (the other
    // warpgroup's A operand) with the maximum, and in registers p (this one's).
    uint32_t p[kKeys / 16][4];
    const auto publish = [&](const float (&reference)[2], float (&correction)[2]) {
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int r = 0; r < 2; ++r) correction[r] = exp2f(m_run[r] - reference[r]);
      unsigned char* p_tile = tile_bytes + kPAtom * kAtomBytes;
#pragma unroll
      for (int i = 0; i < kKeys / 2; i += 2) {
        const int r = (i / 2) % 2, key = 8 * (i / 4) + 2 * t, row = rows[r];
        const float p0 = exp2f(s[i] - reference[r]), p1 = exp2f(s[i + 1] - reference[r]);
        sum[r] += p0 + p1;
        p[i / 8][(i % 8) / 2] = pack_floats(p0, p1);
        *reinterpret_cast<uint32_t*>(p_tile + row * 128 + (((key / 8) ^ (row % 8)) << 4) + (key % 8) * 2) =
            p[i / 8][(i % 8) / 2];
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (t == 0) max_after[wg * kHeads + rows[r]] = reference[r];
        l_run[r] = l_run[r] * correction[r] + quad_sum(sum[r]);
        m_run[r] = reference[r];
      }
      fence_shared_for_mma();
    };
    // (The two warpgroups' paths are kept apart, and each iteration and each exit from the loop ends with no MMA on o
    // in flight: where the compiler sees a path with MMAs running into code that moves o's registers, as at a merge
    // of paths, it serialises every MMA of the kernel.)
    float reference[2], correction[2];
    if (wg == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) reference[r] = fmaxf(m_run[r], quad_max(mx[r]));  // finite: a key
      publish(reference, correction);
      bar_arrive(kAReady, kConsumers);
      rescale_rows(o, correction);
      accumulate_registers(tile, p);  // P_A V_A,L
      if (!has_b) {  // (every exit from the loop waits for its MMAs: see above)
        wait_all();
        break;
      }
      bar_sync(kBReady, kConsumers);  // m_B and P_B published
      float c_b[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_b = max_after[kHeads + rows[r]];
        c_b[r] = exp2f(m_run[r] - m_b);
        l_run[r] *= c_b[r];
        m_run[r] = m_b;
      }
      wait_all();
      mbarrier_arrive(&released[0]);  // A's S and P_A V_A,L done
      rescale_rows(o, c_b);
      accumulate_shared(buffer_base(1));  // P_B V_B,L, done before the next A's scores (the tensor cores take them
      wait_all();                         // in turn anyway)
      mbarrier_arrive(&released[1]);
    } else {
      float c_a[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) mx[r] = quad_max(mx[r]);
      bar_sync(kAReady, kConsumers);  // m_A and P_A published
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_a = max_after[rows[r]];
        c_a[r] = exp2f(m_run[r] - m_a);
        reference[r] = fmaxf(m_a, mx[r]);
        l_run[r] *= c_a[r];
        m_run[r] = m_a;
      }
      // O_R to m_A's scale and P_A V_A,R on the tensor cores while this warpgroup's softmax runs.
      rescale_rows(o, c_a);
      accumulate_shared(buffer_base(0));
      publish(reference, correction);
      bar_arrive(kBReady, kConsumers);
      wait_all();  // P_A V_A,R
      mbarrier_arrive(&released[0]);
      rescale_rows(o, correction);
      accumulate_registers(tile, p);  // P_B V_B,R
      wait_all();
      mbarrier_arrive(&released[1]);
    }
  }

  // The two warpgroups' sums (over the tiles each scored), at the same final maximum, meet.
#pragma unroll
  for (int r = 0; r < 2; ++r)
    if (t == 0) row_sum[wg * kHeads + rows[r]] = l_run[r];
  bar_sync(kSumsMet, kConsumers);
  mla_decode::store_split(o, m_run, row_sum, rows, wg, t, head0, heads, b, split, num_splits, partial, out);
}

}  // namespace

bool mla_decode_seesaw_supports(int64_t heads, int64_t latent, int64_t rope, int64_t keys_per_split) {
  return heads > 0 && heads % kHeads == 0 && latent == kLatent && rope == kRope && keys_per_split % kKeys == 0 &&
         on_sm90();
}

bool mla_decode_seesaw(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                       int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads, float scale,
                       int64_t num_splits, int64_t keys_per_split, float* partial, __nv_bfloat16* out,
                       cudaStream_t stream) {
  CUtensorMap cache_map;
  if (make_bf16_tensor_map(&cache_map, cache, 1, kMapRows, kDim, 1, kKeys, 64) != CUDA_SUCCESS) return false;
  cudaFuncSetAttribute(decode_seesaw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kSharedBytes));
  const dim3 grid(static_cast<unsigned>(heads / kHeads), static_cast<unsigned>(num_splits),
                  static_cast<unsigned>(batch));
  launch_dependent(decode_seesaw_kernel, grid, kThreads, kSharedBytes, stream, cache_map, q, block_table,
                   static_cast<int>(max_blocks_per_seq), seq_lens, static_cast<int>(heads), scale,
                   static_cast<int>(num_splits), static_cast<int>(keys_per_split), partial,
                   num_splits == 1 ? out : nullptr);
  return true;
}

}  // namespace deepinfer::cuda

// Op-table rows: DeepSeek-V4.1's attention side — the window + sparse attention with sinks, the FP8 window cache,
// the FP4 compressed entries and indexer keys, the compressor's pooling, the indexer's scores and top-k, the
// candidate source's block top-k, and the in-forward FP8/FP4 fake-quantisation (hyper-connections: test_ops_v41_hc.cpp).
#include <algorithm>
#include <numeric>

#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/sparse_attention.h"
#include "kernels/cuda/fake_quant.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/indexer.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/sparse_attention.cuh"
#include "kernels/fp_formats.h"
#include "kernels/group_slots.h"

#include "tests/gpu/op_test.h"

namespace deepinfer::op_test {
namespace {

// V4.1's FP8 window cache: rows `stride` apart written into shuffled slots as codes and scales, gathered back: the
// values are the CPU's fake_quant_fp8 of the rows (blocks of 32) bit for bit, magnitudes as in fake_quant below.
// With exact_fit (the engram tables' rule) the rows are FP8 values already, each block of 32 at its own power of two
// (down to 2^-40, below the activation rule's floor), and must come back unchanged.
void fp8_kv_rows(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], stride = r["stride"], num_slots = rows + 13;
  const bool exact_fit = r["exact_fit"] != 0;
  std::vector<float> x_f;
  std::vector<Bf16> bits = r.random_bf16(rows * stride, x_f);
  for (int64_t i = 0; i < rows * stride; ++i) {
    const int shift = static_cast<int>(r.rng()() % 31) - 20;
    float v = (i / 32) % 8 == 3 ? std::ldexp(x_f[i], -12) : std::ldexp(x_f[i], shift);
    if (exact_fit) {  // an e4m3 value times the block's power of two
      const int block_shift = static_cast<int>((i / 32) * 7919 % 51) - 40;
      v = std::ldexp(e4m3_value(static_cast<uint32_t>(r.rng()() % 256) & 0xf7u), block_shift);
    }
    bits[i] = float_to_bf16(v);
    x_f[i] = bf16_to_float(bits[i]);
  }
  std::vector<int64_t> slots(num_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), r.rng());
  slots.resize(rows);
  auto x = DeviceArray<Bf16>::from_host(bits);
  auto d_slots = DeviceArray<int64_t>::from_host(slots);
  DeviceArray<uint8_t> codes(num_slots * n), scales(num_slots * n / 32);
  DeviceArray<Bf16> out(rows * n);
  out.poison();
  cuda::write_fp8_kv_rows(bf(x), stride, d_slots.data(), rows, n, codes.data(), scales.data(), nullptr,
                          exact_fit ? cuda::Fp8Scales::kExactFit : cuda::Fp8Scales::kActivation);
  cuda::gather_fp8_kv_rows(codes.data(), scales.data(), d_slots.data(), rows, n, bf(out), n, nullptr);
  sync();
  std::vector<float> want(rows * n);
  for (int64_t i = 0; i < rows; ++i) {
    if (!exact_fit) cpu::fake_quant_fp8(x_f.data() + i * stride, 1, n, 32);
    std::copy(x_f.begin() + i * stride, x_f.begin() + i * stride + n, want.begin() + i * n);
  }
  r.exact("values read back", to_float(out.to_host()), want);
}

// V4.1's attention core: rows at positions short of the window (3, 40), across it (130, 700), and with up to
// `extras` selected compressed entries each (random picks, ascending), the window keys in the FP8 cache (written
// by write_fp8_kv_rows, the CPU given the values read back); with `padding`, each row's slots end in a few -1 ids
// (select_topk's unused slots), which must be skipped; with `floors`, rows' windows cut at a floor (bounded
// replay): below, inside and above the window's start, and above the row itself (no window key at all).
void sparse_window_attention(OpRun& r) {
  const int64_t heads = r["heads"], hd = r["head_dim"], window = r["window"], max_extras = r["extras"];
  const bool padding = r["padding"] != 0, floored = r["floors"] != 0;
  const std::vector<int32_t> floors = {0, 20, 600, 650, 70, 127};
  const int64_t num_blocks = 40, max_blocks = 12, num_extra = 600, num_slots = num_blocks * 64;
  const std::vector<int32_t> positions = {3, 40, 130, 700, 64, 127};
  const auto rows = static_cast<int64_t>(positions.size());
  std::vector<float> q_f, values_f, extra_f, sinks(heads);
  auto q = DeviceArray<Bf16>::from_host(r.random_bf16(rows * heads * hd, q_f, 0.05f));
  auto values = DeviceArray<Bf16>::from_host(r.random_bf16(num_slots * hd, values_f));
  auto extra = DeviceArray<Bf16>::from_host(r.random_bf16(num_extra * hd, extra_f));
  std::vector<int64_t> all_slots(num_slots);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  auto d_all_slots = DeviceArray<int64_t>::from_host(all_slots);
  DeviceArray<uint8_t> codes(num_slots * hd), scales(num_slots * hd / 32);
  DeviceArray<Bf16> cached(num_slots * hd);
  cuda::write_fp8_kv_rows(bf(values), hd, d_all_slots.data(), num_slots, hd, codes.data(), scales.data(), nullptr);
  cuda::gather_fp8_kv_rows(codes.data(), scales.data(), d_all_slots.data(), num_slots, hd, bf(cached), hd, nullptr);
  sync();
  const std::vector<float> cache_f = to_float(cached.to_host());
  for (float& v : sinks) v = std::normal_distribution<float>(0.0f, 2.0f)(r.rng());
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), r.rng());
  std::vector<int32_t> table(rows * max_blocks), offsets = {0}, ids;
  for (int64_t i = 0; i < rows * max_blocks; ++i) table[i] = blocks[(i * 7) % num_blocks];
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t n = max_extras == 0 ? 0 : static_cast<int64_t>(r.rng()() % (max_extras + 1));
    std::vector<int32_t> pick(num_extra);
    std::iota(pick.begin(), pick.end(), 0);
    std::shuffle(pick.begin(), pick.end(), r.rng());
    pick.resize(n);
    std::sort(pick.begin(), pick.end());
    ids.insert(ids.end(), pick.begin(), pick.end());
    if (padding) ids.insert(ids.end(), 1 + r.rng()() % 5, -1);
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  auto d_table = DeviceArray<int32_t>::from_host(table), d_pos = DeviceArray<int32_t>::from_host(positions);
  auto d_offsets = DeviceArray<int32_t>::from_host(offsets), d_ids = DeviceArray<int32_t>::from_host(ids);
  auto d_sinks = DeviceArray<float>::from_host(sinks);
  auto d_floors = DeviceArray<int32_t>::from_host(floors);
  DeviceArray<Bf16> out(rows * heads * hd);
  out.poison();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const cuda::SparseWindowKeys keys{codes.data(), scales.data(), d_table.data(), max_blocks, d_pos.data(), window,
                                    bf(extra),    max_extras > 0 ? d_offsets.data() : nullptr, d_ids.data(),
                                    floored ? d_floors.data() : nullptr};
  cuda::sparse_window_attention(bf(q), keys, d_sinks.data(), rows, heads, hd, scale, bf(out), nullptr);
  sync();
  std::vector<float> want(rows * heads * hd);
  const cpu::SparseWindowKeys cpu_keys{cache_f.data(), hd, table.data(), max_blocks, positions.data(), window,
                                       extra_f.data(), max_extras > 0 ? offsets.data() : nullptr, ids.data(),
                                       floored ? floors.data() : nullptr};
  cpu::sparse_window_attention(q_f.data(), cpu_keys, sinks.data(), rows, heads, hd, scale, want.data());
  r.close("outputs", to_float(out.to_host()), want);
}

// V4.1's compressed entries (block 16, e4m3 scales) and indexer keys (block 32, ue8m0) cached as FP4 bytes: every
// slot of a cache written from rows of magnitudes 2^-30 .. 2^9 (e4m3 scales subnormal at the low end; a padding row
// skipped), the bytes against the CPU's encode_fp4_rows, then the groups read into a step's layout against what
// fake_quant_fp4 makes of the rows, bit for bit.
void fp4_group_rows(OpRun& r) {
  const int64_t ratio = r["ratio"], dim = r["dim"], S = 3, max_blocks = 3, num_blocks = 11;
  const cuda::Fp4Format format{r["block"], r["block"] == 16};
  const int64_t slots = num_blocks * group_slots_per_block(ratio), width = max_blocks * 64 / ratio;
  std::vector<float> rows_f(slots * dim);
  std::vector<Bf16> rows_bf(slots * dim);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < slots * dim; ++i) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>((i / dim) % 40) - 30);
    rows_bf[i] = float_to_bf16(magnitude * normal(r.rng()));
    rows_f[i] = bf16_to_float(rows_bf[i]);
  }
  std::vector<int64_t> slot_of(slots + 1);
  std::iota(slot_of.begin(), slot_of.end() - 1, 0);
  std::shuffle(slot_of.begin(), slot_of.end() - 1, r.rng());
  slot_of.back() = -1;  // a padding row (its data: row 0 again)
  std::vector<Bf16> src(rows_bf);
  src.insert(src.end(), rows_bf.begin(), rows_bf.begin() + dim);
  auto d_src = DeviceArray<Bf16>::from_host(src);
  auto d_slots = DeviceArray<int64_t>::from_host(slot_of);
  std::vector<uint8_t> init_codes(slots * dim / 2, 0xee), init_scales(slots * dim / format.block, 0xee);
  auto codes = DeviceArray<uint8_t>::from_host(init_codes);
  auto scales = DeviceArray<uint8_t>::from_host(init_scales);
  cuda::write_fp4_rows(bf(d_src), dim, d_slots.data(), slots + 1, dim, format, codes.data(), scales.data(), nullptr);
  sync();
  // The CPU's bytes, row by row into the row's slot.
  std::vector<uint8_t> want_codes(slots * dim / 2), want_scales(slots * dim / format.block);
  for (int64_t t = 0; t < slots; ++t)
    cpu::encode_fp4_rows(rows_f.data() + t * dim, 1, dim, format.block, format.e4m3_scales,
                         want_codes.data() + slot_of[t] * dim / 2, want_scales.data() + slot_of[t] * (dim / format.block));
  r.exact("codes", codes.to_host(), want_codes);
  r.exact("scale bytes", scales.to_host(), want_scales);

  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), r.rng());
  const std::vector<int32_t> tables(blocks.begin(), blocks.begin() + S * max_blocks);
  const std::vector<int32_t> counts = {static_cast<int32_t>(width), 0, static_cast<int32_t>(r.rng()() % (width + 1))};
  const std::vector<int64_t> offsets = {0, width, 2 * width};
  auto d_tables = DeviceArray<int32_t>::from_host(tables);
  auto d_counts = DeviceArray<int32_t>::from_host(counts);
  auto d_offsets = DeviceArray<int64_t>::from_host(offsets);
  DeviceArray<Bf16> out(S * width * dim);
  out.poison();
  cuda::gather_fp4_group_entries(codes.data(), scales.data(), dim, format, d_tables.data(), max_blocks, ratio,
                                 d_counts.data(), d_offsets.data(), S, width, /*zero_padding=*/true, bf(out), nullptr);
  sync();
  std::vector<float> quantised(rows_f);
  cpu::fake_quant_fp4(quantised.data(), slots, dim, format.block, format.e4m3_scales);
  std::vector<int64_t> row_of_slot(slots);
  for (int64_t t = 0; t < slots; ++t) row_of_slot[slot_of[t]] = t;
  std::vector<float> want(S * width * dim, 0.0f);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t g = 0; g < counts[s]; ++g) {
      const int64_t slot = group_slot(tables.data() + s * max_blocks, ratio, g);
      std::copy_n(quantised.begin() + row_of_slot[slot] * dim, dim, want.begin() + (offsets[s] + g) * dim);
    }
  r.exact("the groups' values (fake_quant_fp4's)", to_float(out.to_host()), round_bf16(want));
}

// V4.1's compressed entries read from their group slots (kernels/group_slots.h) into a step's layout: several
// sequences through shuffled block tables, packed or `width` rows a sequence with the padding zeroed.
void gather_group_entries(OpRun& r) {
  const int64_t ratio = r["ratio"], dim = r["dim"], S = 4, max_blocks = 3, num_blocks = 17;
  const bool padded = r["padded"] != 0;
  const int64_t per_block = group_slots_per_block(ratio), width = max_blocks * 64 / ratio;
  std::vector<float> entries_f;
  auto entries = DeviceArray<Bf16>::from_host(r.random_bf16(num_blocks * per_block * dim, entries_f));
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), r.rng());
  const std::vector<int32_t> tables(blocks.begin(), blocks.begin() + S * max_blocks);
  std::vector<int32_t> counts(S);
  std::vector<int64_t> offsets(S);
  int64_t rows = 0;
  for (int64_t s = 0; s < S; ++s) {
    counts[s] = static_cast<int32_t>(s == 0 ? width : s == 1 ? 0 : r.rng()() % (width + 1));
    offsets[s] = rows;
    rows += padded ? width : counts[s];
  }
  auto d_tables = DeviceArray<int32_t>::from_host(tables);
  auto d_counts = DeviceArray<int32_t>::from_host(counts);
  auto d_offsets = DeviceArray<int64_t>::from_host(offsets);
  DeviceArray<Bf16> out(std::max<int64_t>(rows, 1) * dim);
  out.poison();
  cuda::gather_group_entries(bf(entries), dim, d_tables.data(), max_blocks, ratio, d_counts.data(), d_offsets.data(),
                             S, width, padded, bf(out), nullptr);
  sync();
  std::vector<float> want(rows * dim, 0.0f);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t g = 0; g < counts[s]; ++g) {
      const int64_t slot = group_slot(tables.data() + s * max_blocks, ratio, g);
      std::copy_n(entries_f.begin() + slot * dim, dim, want.begin() + (offsets[s] + g) * dim);
    }
  std::vector<float> got = to_float(out.to_host());
  got.resize(rows * dim);
  r.exact("gathered rows", got, want);
}

// V4.1's gated pooling of KV sources' compressor inputs, [K=V | kv | gate] entries from a shuffled paged cache:
// several sequences in one launch (one without a complete group), packed or in `width` rows a sequence with the
// padding zeroed; with `first`, each sequence's groups from its own first group on (those a step completes).
void compress_pool(OpRun& r) {
  const int64_t width = r["groups"], ratio = r["ratio"], hd = r["head_dim"], S = r["sequences"], stride = 3 * hd;
  const bool padded = r["padded"] != 0, from_first = r["first"] != 0;
  const int64_t max_blocks = (width * ratio + 63) / 64, num_blocks = S * max_blocks + 7;
  std::vector<float> cache_f;
  auto cache = DeviceArray<Bf16>::from_host(r.random_bf16(num_blocks * 64 * stride, cache_f));
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), r.rng());
  const std::vector<int32_t> tables(blocks.begin(), blocks.begin() + S * max_blocks);
  std::vector<int32_t> counts(S), first(S, 0);
  std::vector<int64_t> offsets(S);
  int64_t rows = 0;
  for (int64_t s = 0; s < S; ++s) {
    counts[s] = static_cast<int32_t>(s == 0 ? width : s == 1 ? 0 : r.rng()() % (width + 1));
    if (from_first) {
      first[s] = static_cast<int32_t>(std::min<int64_t>(s % 3 + 1, width));
      counts[s] = std::min<int32_t>(counts[s], static_cast<int32_t>(width) - first[s]);
    }
    offsets[s] = rows;
    rows += padded ? width : counts[s];
  }
  auto d_tables = DeviceArray<int32_t>::from_host(tables);
  auto d_counts = DeviceArray<int32_t>::from_host(counts);
  auto d_offsets = DeviceArray<int64_t>::from_host(offsets);
  auto d_first = DeviceArray<int32_t>::from_host(first);
  DeviceArray<Bf16> out(std::max<int64_t>(rows, 1) * hd);
  out.poison();
  cuda::compress_pool_sequences(bf(cache), stride, d_tables.data(), max_blocks, d_counts.data(), d_offsets.data(),
                                from_first ? d_first.data() : nullptr, S, width, ratio, hd, hd, 2 * hd, padded,
                                bf(out), nullptr);
  sync();
  std::vector<float> want(std::max<int64_t>(rows, 1) * hd);
  cpu::compress_pool_sequences(cache_f.data(), stride, tables.data(), max_blocks, counts.data(), offsets.data(),
                               from_first ? first.data() : nullptr, S, width, ratio, hd, hd, 2 * hd, padded,
                               want.data());
  std::vector<float> got = to_float(out.to_host());
  got.resize(rows * hd);
  want.resize(rows * hd);
  r.close("pooled entries", got, want);
}

// V4.1's indexer scores: relu'd per-head dot products weighted per head, summed; rows seeing all, some or none of
// the compressed keys. With `offsets`, each row reads its own keys (rows of several sequences, the keys side by
// side, a row's visible count within its own).
void indexer_scores(OpRun& r) {
  const int64_t rows = r["rows"], heads = r["heads"], dim = r["dim"], num_keys = r["keys"];
  const bool offsets = r["offsets"] != 0;
  std::vector<float> q_f, k_f, weights(rows * heads);
  auto q = DeviceArray<Bf16>::from_host(r.random_bf16(rows * heads * dim, q_f));
  const int64_t key_rows = offsets ? rows * num_keys : num_keys;
  auto keys = DeviceArray<Bf16>::from_host(r.random_bf16(key_rows * dim, k_f));
  std::vector<int64_t> key_offsets(rows);
  for (int64_t i = 0; i < rows; ++i) key_offsets[i] = offsets ? (rows - 1 - i) * num_keys : 0;
  auto d_offsets = DeviceArray<int64_t>::from_host(key_offsets);
  for (float& w : weights) w = std::normal_distribution<float>()(r.rng());
  std::vector<int32_t> visible(rows);
  for (int64_t i = 0; i < rows; ++i) visible[i] = static_cast<int32_t>(i == 0 ? 0 : i == 1 ? num_keys : r.rng()() % num_keys);
  auto d_weights = DeviceArray<float>::from_host(weights);
  auto d_visible = DeviceArray<int32_t>::from_host(visible);
  DeviceArray<float> scores(rows * num_keys);
  scores.poison();
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(dim)), heads_scale = 1.0f / std::sqrt(float(heads));
  cuda::indexer_scores(bf(q), d_weights.data(), bf(keys), offsets ? d_offsets.data() : nullptr, d_visible.data(), rows,
                       heads, dim, num_keys, softmax_scale,
                       heads_scale, scores.data(), nullptr);
  sync();
  std::vector<float> want(rows * num_keys);
  cpu::indexer_scores(q_f.data(), weights.data(), k_f.data(), offsets ? key_offsets.data() : nullptr, visible.data(),
                      rows, heads, dim, num_keys,
                      softmax_scale, heads_scale, want.data());
  // The -inf entries must match exactly; the finite ones at the row's tolerance.
  std::vector<float> got = scores.to_host(), got_finite, want_finite;
  std::vector<int32_t> got_masked, want_masked;
  for (size_t i = 0; i < want.size(); ++i) {
    got_masked.push_back(std::isinf(got[i]) ? 1 : 0);
    want_masked.push_back(std::isinf(want[i]) ? 1 : 0);
    if (!std::isinf(want[i])) got_finite.push_back(got[i]), want_finite.push_back(want[i]);
  }
  r.exact("which entries are masked", got_masked, want_masked);
  r.close("scores", got_finite, want_finite);
}

// The prefill indexer: the per-head dot products by cuBLAS (as the model runs them), then indexer_head_sum,
// against the CPU's indexer_scores on the same queries and keys; and indexer_head_sum alone against its CPU form
// on the same products. Rows seeing none, all and some of the keys; scores padded to a wider row.
void indexer_head_sum(OpRun& r) {
  const int64_t rows = r["rows"], heads = r["heads"], dim = r["dim"], num_keys = r["keys"], width = num_keys + 5;
  std::vector<float> q_f, k_f, weights(rows * heads);
  auto q = DeviceArray<Bf16>::from_host(r.random_bf16(rows * heads * dim, q_f));
  auto keys = DeviceArray<Bf16>::from_host(r.random_bf16(num_keys * dim, k_f));
  for (float& w : weights) w = std::normal_distribution<float>()(r.rng());
  std::vector<int32_t> visible(rows);
  for (int64_t i = 0; i < rows; ++i)
    visible[i] = static_cast<int32_t>(i == 0 ? 0 : i == 1 ? num_keys : r.rng()() % num_keys);
  auto d_weights = DeviceArray<float>::from_host(weights);
  auto d_visible = DeviceArray<int32_t>::from_host(visible);
  DeviceArray<float> dots(rows * heads * num_keys), scores(rows * width);
  scores.poison();
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(dim)), heads_scale = 1.0f / std::sqrt(float(heads));
  ASSERT_EQ(cuda::gemm_bf16(r.blas(), rows * heads, num_keys, dim, {bf(q), dim}, {bf(keys), dim}, true, dots.data(),
                            num_keys, 0, true, 1), CUBLAS_STATUS_SUCCESS);
  cuda::indexer_head_sum(dots.data(), num_keys, d_weights.data(), d_visible.data(), rows, heads, num_keys, width,
                         softmax_scale, heads_scale, scores.data(), nullptr);
  sync();
  std::vector<float> full(rows * num_keys), from_dots(rows * width);
  cpu::indexer_scores(q_f.data(), weights.data(), k_f.data(), nullptr, visible.data(), rows, heads, dim, num_keys,
                      softmax_scale, heads_scale, full.data());
  cpu::indexer_head_sum(dots.to_host().data(), num_keys, weights.data(), visible.data(), rows, heads, num_keys, width,
                        softmax_scale, heads_scale, from_dots.data());
  const std::vector<float> got = scores.to_host();
  std::vector<float> got_finite, want_finite, same_dots;
  std::vector<int32_t> got_masked, want_masked, dots_masked;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t g = 0; g < width; ++g) {
      const float want = g < num_keys ? full[i * num_keys + g] : -INFINITY, value = got[i * width + g];
      got_masked.push_back(std::isinf(value) ? 1 : 0);
      want_masked.push_back(std::isinf(want) ? 1 : 0);
      dots_masked.push_back(std::isinf(from_dots[i * width + g]) ? 1 : 0);
      if (!std::isinf(want)) {
        got_finite.push_back(value);
        want_finite.push_back(want);
        same_dots.push_back(from_dots[i * width + g]);
      }
    }
  r.exact("which entries are masked", got_masked, want_masked);
  r.exact("which entries the CPU's head sum masks", got_masked, dots_masked);
  r.close("scores against indexer_scores", got_finite, want_finite);
  r.close("scores against the CPU's head sum of the same products", got_finite, same_dots);
}

// V4.1's in-forward quantisation, bf16 rows in place against the CPU on the same values: bit for bit (the formats'
// code is one for both, kernels/fp_formats.h). Values over a wide range of magnitudes, blocks of tiny ones included.
// Rows `stride` apart, the first n quantised (the V4.1 model quantises K=V in place inside its projection's rows):
// the rest of each row must stay as it was.
void fake_quant(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], block = r["block"], format = r["format"], stride = r["stride"];
  std::vector<float> x_f;
  std::vector<Bf16> bits = r.random_bf16(rows * stride, x_f);
  for (int64_t i = 0; i < rows * stride; ++i) {  // magnitudes from 2^-20 to 2^10, a block in eight at 2^-12
    const int shift = static_cast<int>(r.rng()() % 31) - 20;
    const float v = (i / block) % 8 == 3 ? std::ldexp(x_f[i], -12) : std::ldexp(x_f[i], shift);
    bits[i] = float_to_bf16(v);
    x_f[i] = bf16_to_float(bits[i]);
  }
  auto x = DeviceArray<Bf16>::from_host(bits);
  if (format == 8) cuda::fake_quant_fp8(bf(x), rows, n, stride, block, nullptr);
  else cuda::fake_quant_fp4(bf(x), rows, n, stride, block, format == 4, nullptr);
  sync();
  for (int64_t i = 0; i < rows; ++i) {
    if (format == 8) cpu::fake_quant_fp8(x_f.data() + i * stride, 1, n, block);
    else cpu::fake_quant_fp4(x_f.data() + i * stride, 1, n, block, format == 4);
  }
  r.exact("dequantised values", to_float(x.to_host()), x_f);
}

// The indexer's top-k: rows of random scores rounded to a coarse grid (many ties at the threshold), their tails
// masked to -inf at random points, one row with fewer finite scores than k and one with none.
void select_topk(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], k = r["k"];
  const bool zeros = r["zeros"] != 0;  // most scores +0 or -0, which tie (the lower index first), as on the CPU
  std::vector<float> scores(rows * n);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t visible = i == 0 ? n : i == 1 ? k / 2 : i == 2 ? 0 : static_cast<int64_t>(r.rng()() % (n + 1));
    for (int64_t g = 0; g < n; ++g) {
      const float value = std::round(std::normal_distribution<float>()(r.rng()) * 8.0f) / 8.0f;
      const float zero = r.rng()() % 2 == 0 ? 0.0f : -0.0f;
      scores[i * n + g] = g >= visible ? -INFINITY : zeros && r.rng()() % 4 != 0 ? zero : value;
    }
  }
  auto d_scores = DeviceArray<float>::from_host(scores);
  DeviceArray<int32_t> ids(rows * k), counts(rows);
  ids.poison();
  counts.poison();
  cuda::select_topk(d_scores.data(), rows, n, k, ids.data(), counts.data(), nullptr);
  sync();
  std::vector<int32_t> want_ids(rows * k, 0), want_counts(rows);
  cpu::select_topk(scores.data(), rows, n, k, want_ids.data(), want_counts.data());
  const std::vector<int32_t> got_ids = ids.to_host(), got_counts = counts.to_host();
  r.exact("counts", got_counts, want_counts);
  std::vector<int32_t> got_kept, want_kept;  // the written ids only (the rest of each row is not the op's)
  for (int64_t i = 0; i < rows; ++i)
    for (int32_t j = 0; j < std::min(want_counts[i], got_counts[i]); ++j)
      got_kept.push_back(got_ids[i * k + j]), want_kept.push_back(want_ids[i * k + j]);
  r.exact("kept indices, ascending", got_kept, want_kept);
}

// The candidate mask on a later index layer's scores, and select_topk's picks as ids into concatenated entries.
void mask_scores(OpRun& r) {
  const int64_t n = r["n"];
  std::vector<float> scores(n);
  std::vector<uint8_t> mask(n);
  for (int64_t i = 0; i < n; ++i) {
    scores[i] = std::normal_distribution<float>()(r.rng());
    mask[i] = static_cast<uint8_t>(r.rng()() % 3 == 0 ? 0 : 1 + r.rng()() % 255);  // any nonzero byte keeps
  }
  auto d_scores = DeviceArray<float>::from_host(scores);
  auto d_mask = DeviceArray<uint8_t>::from_host(mask);
  cuda::mask_scores(d_scores.data(), d_mask.data(), n, nullptr);
  sync();
  cpu::mask_scores(scores.data(), mask.data(), n);
  r.exact("masked scores", d_scores.to_host(), scores);
}

// Picks as ids into a batch's compressed entries, each row's from its sequence's first (rows of 3 sequences).
void selected_entry_ids(OpRun& r) {
  const int64_t rows = r["rows"], k = r["k"];
  std::vector<int32_t> ids(rows * k), counts(rows);
  std::vector<int64_t> bases(rows);
  for (int64_t i = 0; i < rows; ++i) {
    bases[i] = r["base"] * (3 * i / rows);
    counts[i] = static_cast<int32_t>(i == 0 ? 0 : i == 1 ? k : r.rng()() % (k + 1));
    for (int64_t j = 0; j < k; ++j) ids[i * k + j] = j < counts[i] ? static_cast<int32_t>(r.rng()() % 1000) : 12345;
  }
  auto d_ids = DeviceArray<int32_t>::from_host(ids), d_counts = DeviceArray<int32_t>::from_host(counts);
  auto d_bases = DeviceArray<int64_t>::from_host(bases);
  DeviceArray<int32_t> out(rows * k);
  out.poison();
  cuda::selected_entry_ids(d_ids.data(), d_counts.data(), rows, k, d_bases.data(), out.data(), nullptr);
  sync();
  std::vector<int32_t> want(rows * k);
  cpu::selected_entry_ids(ids.data(), counts.data(), rows, k, bases.data(), want.data());
  r.exact("entry ids", out.to_host(), want);
}

// The candidate source's block top-k: scores on a coarse grid (ties between blocks), tails masked at random
// visible counts (one row seeing nothing, one everything).
void candidate_blocks(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], bs = r["block_size"], k = r["topk_blocks"];
  const int64_t num_blocks = (n + bs - 1) / bs;
  std::vector<float> scores(rows * n);
  std::vector<int32_t> visible(rows);
  for (int64_t i = 0; i < rows; ++i) {
    visible[i] = static_cast<int32_t>(i == 0 ? 0 : i == 1 ? n : r.rng()() % (n + 1));
    for (int64_t g = 0; g < n; ++g)
      scores[i * n + g] = g < visible[i] ? std::round(std::normal_distribution<float>()(r.rng()) * 4.0f) / 4.0f
                                         : -INFINITY;
  }
  auto d_scores = DeviceArray<float>::from_host(scores);
  auto d_visible = DeviceArray<int32_t>::from_host(visible);
  DeviceArray<float> block_scores(rows * num_blocks);
  DeviceArray<int32_t> block_ids(rows * k), block_counts(rows);
  DeviceArray<uint8_t> mask(rows * n);
  mask.poison();
  cuda::candidate_blocks(d_scores.data(), d_visible.data(), rows, n, k, bs, block_scores.data(), block_ids.data(),
                         block_counts.data(), mask.data(), nullptr);
  sync();
  std::vector<uint8_t> want(rows * n);
  cpu::candidate_blocks(scores.data(), visible.data(), rows, n, k, bs, want.data());
  r.exact("candidate masks", mask.to_host(), want);
}

}  // namespace

void add_v41_rows(OpTable& t) {
  // V4.1-Flash: 64 heads of 512, window 128, index top-k 512; and a narrow odd one.
  for (int64_t extras : {0, 512})
    t.add("sparse_window_attention", "bf16",
          {{"heads", 64}, {"head_dim", 512}, {"window", 128}, {"extras", extras}, {"padding", 0}, {"floors", 0}},
          kBf16, sparse_window_attention);
  // The tensor-core kernel's edges: padding ids inside its key tiles, a head group cut short (20 = 16 + 4).
  for (int64_t heads : {16, 20, 64})
    t.add("sparse_window_attention", "bf16",
          {{"heads", heads}, {"head_dim", 512}, {"window", 128}, {"extras", heads == 16 ? 64 : 512}, {"padding", 1},
           {"floors", 0}},
          kBf16, sparse_window_attention);
  // Bounded replay's window floors, on both kernels (head_dim 512: tensor cores; 64: CUDA cores).
  for (int64_t hd : {512, 64})
    for (int64_t extras : {0, 64})
      t.add("sparse_window_attention", "bf16",
            {{"heads", 20}, {"head_dim", hd}, {"window", 128}, {"extras", extras}, {"padding", 1}, {"floors", 1}},
            kBf16, sparse_window_attention);
  t.add("mask_scores", "f32", {{"n", 10007}}, kExact, mask_scores);
  t.add("selected_entry_ids", "i32", {{"rows", 37}, {"k", 512}, {"base", 777}}, kExact, selected_entry_ids);
  t.add("sparse_window_attention", "bf16",
        {{"heads", 3}, {"head_dim", 96}, {"window", 16}, {"extras", 40}, {"padding", 1}, {"floors", 0}}, kBf16,
        sparse_window_attention);
  for (int64_t exact_fit : {0, 1}) {
    for (int64_t stride : {512, 1568})
      t.add("fp8_kv_rows", "u8", {{"rows", 300}, {"n", 512}, {"stride", stride}, {"exact_fit", exact_fit}}, kExact,
            fp8_kv_rows);
    t.add("fp8_kv_rows", "u8", {{"rows", 7}, {"n", 64}, {"stride", 64}, {"exact_fit", exact_fit}}, kExact,
          fp8_kv_rows);
  }
  for (int64_t ratio : {1, 4, 128}) {
    t.add("fp4_group_rows", "u8", {{"ratio", ratio}, {"dim", 512}, {"block", 16}}, kExact, fp4_group_rows);
    t.add("fp4_group_rows", "u8", {{"ratio", ratio}, {"dim", 128}, {"block", 32}}, kExact, fp4_group_rows);
  }
  for (int64_t padded : {0, 1})
    for (int64_t ratio : {1, 2, 3, 128})
      t.add("gather_group_entries", "bf16", {{"ratio", ratio}, {"dim", ratio == 3 ? 72 : 512}, {"padded", padded}},
            kExact, gather_group_entries);
  for (int64_t padded : {0, 1}) {
    for (int64_t first : {0, 1}) {
      for (int64_t ratio : {4, 128})
        t.add("compress_pool_sequences", "bf16",
              {{"groups", 10}, {"ratio", ratio}, {"head_dim", 512}, {"sequences", 4}, {"padded", padded},
               {"first", first}},
              kBf16, compress_pool);
      t.add("compress_pool_sequences", "bf16",
            {{"groups", 3}, {"ratio", 3}, {"head_dim", 200}, {"sequences", 3}, {"padded", padded}, {"first", first}},
            kBf16, compress_pool);
    }
  }
  t.add("indexer_head_sum", "f32", {{"rows", 37}, {"heads", 64}, {"dim", 128}, {"keys", 1000}}, kF32, indexer_head_sum);
  t.add("indexer_head_sum", "f32", {{"rows", 5}, {"heads", 3}, {"dim", 72}, {"keys", 70}}, kF32, indexer_head_sum);
  for (int64_t offsets : {0, 1}) {
    t.add("indexer_scores", "f32", {{"rows", 5}, {"heads", 64}, {"dim", 128}, {"keys", 1000}, {"offsets", offsets}},
          kF32, indexer_scores);
    t.add("indexer_scores", "f32", {{"rows", 4}, {"heads", 3}, {"dim", 72}, {"keys", 70}, {"offsets", offsets}}, kF32,
          indexer_scores);
  }
  // format 8: fp8 (window KV, blocks of 32); 4: fp4 with e4m3 scales (compressed KV, 16); 5: fp4 with
  // power-of-two scales (indexer, 32).
  for (int64_t stride : {512, 1568}) {
    t.add("fake_quant_fp8", "bf16", {{"rows", 33}, {"n", 512}, {"block", 32}, {"format", 8}, {"stride", stride}}, kExact,
          fake_quant);
    t.add("fake_quant_fp4", "bf16", {{"rows", 33}, {"n", 512}, {"block", 16}, {"format", 4}, {"stride", stride}}, kExact,
          fake_quant);
  }
  t.add("fake_quant_fp4", "bf16", {{"rows", 65}, {"n", 128}, {"block", 32}, {"format", 5}, {"stride", 128}}, kExact,
        fake_quant);
  for (int64_t zeros : {0, 1}) {
    t.add("select_topk", "i32", {{"rows", 8}, {"n", 5000}, {"k", 512}, {"zeros", zeros}}, kExact, select_topk);
    t.add("select_topk", "i32", {{"rows", 8}, {"n", 100}, {"k", 7}, {"zeros", zeros}}, kExact, select_topk);
  }
  // V4.1-Flash's defaults (blocks of 8, 2,048 of them kept) over 20,000 compressed entries; and smaller ones.
  t.add("candidate_blocks", "u8", {{"rows", 4}, {"n", 20000}, {"block_size", 8}, {"topk_blocks", 2048}}, kExact,
        candidate_blocks);
  t.add("candidate_blocks", "u8", {{"rows", 8}, {"n", 2000}, {"block_size", 64}, {"topk_blocks", 16}}, kExact,
        candidate_blocks);
  t.add("candidate_blocks", "u8", {{"rows", 8}, {"n", 100}, {"block_size", 7}, {"topk_blocks", 3}}, kExact,
        candidate_blocks);
}

}  // namespace deepinfer::op_test

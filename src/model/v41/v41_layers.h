// The DeepSeek-V4.1 layer loop, written once for every backend. The residual is hc_mult streams; each sublayer
// (window/compressed attention, then the MoE) reads them through a hyper-connection "pre" (the streams'
// mixes, a weighted collapse to one row and the sublayer's RMSNorm) and writes back through its "post" (the
// sublayer output and the mixed streams, combined). A backend supplies the blocks over its own activations:
//
//   embed()              the streams: hc_mult copies of the token embedding
//   begin_layer(l)       before layer l: where bounded replay's compact form drops the rows the remaining layers
//                        need not compute (v41_first_compact_layer; a no-op elsewhere)
//   engram(l)            at an engram layer, every stream += its gate * the value looked up by the token's n-gram
//                        hashes (nothing at other layers)
//   hc_pre(l, site)      the site's mixes from the streams; h = rms_norm(collapse of the streams) with the
//                        site's norm (the collapse weights are those the previous site's mixes produced)
//   attention(l)         out = attention(h), with the layer's caches (window, compressed, indexer)
//   moe(l)               out = MoE(h) (routed and shared experts)
//   hc_post()            streams = post * out + comb . streams
//   head()               the logits of the wanted rows, from the final collapse, norm and head
//
// The CPU reference (v41_model.cpp) implements the blocks; a CUDA backend implements the same ones.
#pragma once

#include <cstdint>

#include "src/model/v41/v41_config.h"

namespace deepinfer {

enum class HyperSite { kAttention, kFfn };

template <typename Blocks>
auto run_v41_layers(const V41TextConfig& v, Blocks& blocks) {
  blocks.embed();
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    blocks.begin_layer(l);
    blocks.engram(l);
    blocks.hc_pre(l, HyperSite::kAttention);
    blocks.attention(l);
    blocks.hc_post();
    blocks.hc_pre(l, HyperSite::kFfn);
    blocks.moe(l);
    blocks.hc_post();
  }
  return blocks.head();
}

}  // namespace deepinfer

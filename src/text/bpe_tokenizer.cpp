#include "src/text/bpe_tokenizer.h"

#include <algorithm>
#include <climits>
#include <future>
#include <map>
#include <queue>

#include <nlohmann/json.hpp>

#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/json_depth.h"
#include "src/text/utf8.h"

namespace deepinfer::text {

struct BpeTokenizer::Trie {
  struct Node {
    std::map<uint8_t, int32_t> next;
    int32_t id = -1;  // an added token ends here
  };
  std::vector<Node> nodes{Node{}};

  void insert(std::string_view s, int32_t id) {
    int32_t at = 0;
    for (char ch : s) {
      const auto b = static_cast<uint8_t>(ch);
      auto it = nodes[at].next.find(b);
      if (it == nodes[at].next.end()) {
        nodes.push_back(Node{});
        it = nodes[at].next.emplace(b, static_cast<int32_t>(nodes.size() - 1)).first;
      }
      at = it->second;
    }
    nodes[at].id = id;
  }
  // The longest token starting at `from`: its length (0: none) and id.
  size_t longest(std::string_view s, size_t from, int32_t* id) const {
    size_t best = 0;
    int32_t at = 0;
    for (size_t i = from; i < s.size(); ++i) {
      const auto it = nodes[at].next.find(static_cast<uint8_t>(s[i]));
      if (it == nodes[at].next.end()) break;
      at = it->second;
      if (nodes[at].id >= 0) best = i + 1 - from, *id = nodes[at].id;
    }
    return best;
  }
};

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A regex matching `literal` exactly (a Split whose pattern is a String).
std::string quoted(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// Token ids up to 2^24 - 1, as the model configs' vocabularies: an id sizes the id -> token table, so a wild one
// must be refused before it allocates.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// A token in a message: JSON-quoted (control characters visible), long ones cut.
std::string token_label(const std::string& token) {
  const std::string quoted = nlohmann::json(token).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return quoted.size() <= 80 ? quoted : quoted.substr(0, 80) + "...";
}

// An id of tokenizer.json: an integer in [0, kMaxTokenId]. Read exactly, so that 2^32 + 5 or 5.5 is not taken
// for 5 (overwriting token 5) and -1 does not index a table.
int32_t token_id(const nlohmann::json& id, const std::string& source, std::string_view part,
                 const std::string& token) {
  const bool in_range = (id.is_number_unsigned() && id.get<uint64_t>() <= static_cast<uint64_t>(kMaxTokenId)) ||
                        (id.is_number_integer() && !id.is_number_unsigned() && id.get<int64_t>() >= 0 &&
                         id.get<int64_t>() <= kMaxTokenId);
  DI_INPUT_CHECK(in_range, "{}: {} gives token {} the id {}: an id must be an integer in [0, {}]; fix or regenerate "
                 "the file", source, part, token_label(token), id.dump().substr(0, 40), kMaxTokenId);
  return static_cast<int32_t>(id.get<int64_t>());
}

// A part of the file without the layout of Hugging Face's tokenizer.json (a string where an object belongs, a
// missing key): named, with the library's reason.
[[noreturn]] void damaged(const std::string& source, std::string_view part, const std::exception& e) {
  throw InputError(fmt::format("{}: {} is damaged: {} (expected the layout of a Hugging Face tokenizer.json)", source,
                               part, e.what()));
}

template <class Read>
void reading(const std::string& source, std::string_view part, Read&& read) {
  try {
    read();
  } catch (const nlohmann::json::exception& e) {
    damaged(source, part, e);
  }
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const std::filesystem::path& tokenizer_json) {
  const std::string source = tokenizer_json.string();
  const std::string text = read_text_file(tokenizer_json, "tokenizer");
  check_json_file_depth(text, source);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  DI_INPUT_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", source);
  DI_INPUT_CHECK(j.contains("model") && j["model"].is_object(), "{}: 'model' must be an object (the BPE model)",
                 source);
  BpeTokenizer t;
  t.source_ = source;
  reading(source, "the normalizer, pre_tokenizer, model type, decoder or post_processor",
          [&] { t.read_pipeline(j, source); });
  t.read_byte_map();
  t.read_vocab(j["model"], source);
  t.read_merges(j["model"], source);
  t.read_added_tokens(j, source);
  t.is_added_.assign(t.id_to_token_.size(), false);
  t.is_special_.assign(t.id_to_token_.size(), false);
  for (const AddedToken& a : t.added_) t.is_added_[a.id] = true, t.is_special_[a.id] = a.special;
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    t.max_token_bytes_ = std::max<int64_t>(t.max_token_bytes_, static_cast<int64_t>(t.token_bytes(id).size()));
  return t;
}

void BpeTokenizer::read_pipeline(const nlohmann::json& j, const std::string& source) {
  auto refuse = [&](const std::string& key, const nlohmann::json& value) {
    throw InputError(fmt::format("{}: {} = {} is not supported (a byte-level BPE of the DeepSeek kind is)", source,
                                 key, value.dump().substr(0, 200)));
  };
  const nlohmann::json normalizer = j.value("normalizer", nlohmann::json());
  if (!normalizer.is_null() &&
      !(normalizer.value("type", "") == "Sequence" && normalizer.value("normalizers", nlohmann::json::array()).empty()))
    refuse("normalizer", normalizer);

  const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
  const nlohmann::json steps = pre.value("type", "") == "Sequence" ? pre.value("pretokenizers", nlohmann::json())
                                                                   : nlohmann::json::array({pre});
  bool byte_level = false;
  for (const nlohmann::json& step : steps) {
    const std::string type = step.value("type", "");
    if (type == "Split" && step.value("behavior", "") == "Isolated" && !step.value("invert", false) && !byte_level) {
      const nlohmann::json& pattern = step.at("pattern");
      splits_.emplace_back(pattern.contains("Regex") ? pattern["Regex"].get<std::string>()
                                                     : quoted(pattern.at("String").get<std::string>()),
                           fmt::format("{}: the pre-tokenizer's Split regex {}", source, splits_.size()));
    } else if (type == "ByteLevel" && !step.value("add_prefix_space", false) && !step.value("use_regex", true)) {
      byte_level = true;
    } else {
      refuse("pre_tokenizer step", step);
    }
  }
  if (!byte_level) refuse("pre_tokenizer (no ByteLevel step)", pre);

  const nlohmann::json& model = j.at("model");
  if (model.value("type", "") != "BPE" || !model.value("dropout", nlohmann::json()).is_null() ||
      !model.value("unk_token", nlohmann::json()).is_null() || model.value("byte_fallback", false) ||
      model.value("ignore_merges", false) || !model.value("continuing_subword_prefix", nlohmann::json()).is_null() ||
      !model.value("end_of_word_suffix", nlohmann::json()).is_null())
    refuse("model", nlohmann::json{{"type", model.value("type", "")}});
  const nlohmann::json decoder = j.value("decoder", nlohmann::json());
  if (decoder.value("type", "") != "ByteLevel") refuse("decoder", decoder);
  const nlohmann::json post = j.value("post_processor", nlohmann::json());
  if (!post.is_null() && post.value("type", "") != "ByteLevel") refuse("post_processor", post);
}

void BpeTokenizer::read_byte_map() {
  // GPT-2's byte map: printable bytes stand for themselves, the others for 256 + n in byte order.
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
    append_utf8(byte_char_[b], c);
    char_byte_[c] = static_cast<uint8_t>(b);
  }
}

void BpeTokenizer::set_token(int32_t id, const std::string& token) {
  if (static_cast<size_t>(id) >= id_to_token_.size()) id_to_token_.resize(id + 1);
  id_to_token_[id] = token;
}

void BpeTokenizer::read_vocab(const nlohmann::json& model, const std::string& source) {
  const auto vocab = model.find("vocab");
  DI_INPUT_CHECK(vocab != model.end() && vocab->is_object(), "{}: model.vocab must be an object of token: id", source);
  std::vector<bool> taken;
  for (const auto& [token, id] : vocab->items()) {
    const int32_t i = token_id(id, source, "model.vocab", token);
    if (static_cast<size_t>(i) >= taken.size()) taken.resize(i + 1, false);
    // Two tokens of one id would make decoding ambiguous: the file is damaged.
    DI_INPUT_CHECK(!taken[i], "{}: model.vocab gives the id {} to {} and to {}; ids must be distinct", source, i,
                   token_label(id_to_token_[i]), token_label(token));
    taken[i] = true;
    vocab_.emplace(token, i);
    set_token(i, token);
  }
}

void BpeTokenizer::read_merges(const nlohmann::json& model, const std::string& source) {
  const auto merges = model.find("merges");
  DI_INPUT_CHECK(merges != model.end() && merges->is_array(), "{}: model.merges must be a list", source);
  int32_t rank = 0;
  try {
    for (const nlohmann::json& merge : *merges) {
      std::string left, right;
      if (merge.is_string()) {
        const std::string m = merge.get<std::string>();
        const size_t space = m.find(' ');
        DI_INPUT_CHECK(space != std::string::npos, "{}: merge '{}' has no space", source, m);
        left = m.substr(0, space), right = m.substr(space + 1);
      } else {
        DI_INPUT_CHECK(merge.is_array() && merge.size() == 2,
                       "{}: model.merges[{}] is neither \"left right\" nor a pair of tokens", source, rank);
        left = merge.at(0).get<std::string>(), right = merge.at(1).get<std::string>();
      }
      const int32_t a = token_to_id(left), b = token_to_id(right), merged = token_to_id(left + right);
      DI_INPUT_CHECK(a >= 0 && b >= 0 && merged >= 0, "{}: merge {} names a token outside the vocabulary", source,
                     rank);
      merges_.emplace(pair_key(a, b), std::pair{rank++, merged});
    }
  } catch (const nlohmann::json::exception& e) {
    damaged(source, fmt::format("model.merges[{}]", rank), e);
  }
}

void BpeTokenizer::read_added_tokens(const nlohmann::json& j, const std::string& source) {
  auto raw = std::make_shared<Trie>(), normalized = std::make_shared<Trie>();
  const auto list = j.find("added_tokens");
  DI_INPUT_CHECK(list == j.end() || list->is_array(), "{}: added_tokens must be a list", source);
  size_t at = 0;
  try {
    for (; list != j.end() && at < list->size(); ++at) {
      const nlohmann::json& a = (*list)[at];
      const std::string part = fmt::format("added_tokens[{}]", at);
      if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false))
        throw InputError(fmt::format("{}: {} has lstrip, rstrip or single_word, which are not supported", source,
                                     part));
      const std::string content = a.at("content").get<std::string>();
      AddedToken added{content, token_id(a.at("id"), source, part, content), a.value("special", false)};
      set_token(added.id, added.content);
      (a.value("normalized", true) ? *normalized : *raw).insert(added.content, added.id);
      added_.push_back(std::move(added));
    }
  } catch (const nlohmann::json::exception& e) {
    damaged(source, fmt::format("added_tokens[{}]", at), e);
  }
  raw_added_ = raw;
  normalized_added_ = normalized;
}

int32_t BpeTokenizer::token_to_id(const std::string& token) const {
  for (const AddedToken& added : added_)  // first, as Hugging Face's token_to_id (few: a linear search)
    if (added.content == token) return added.id;
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

std::vector<BpeTokenizer::Segment> BpeTokenizer::split_added(std::string_view text) const {
  auto split = [](const Trie& trie, const std::vector<Segment>& in) {
    std::vector<Segment> out;
    for (const Segment& seg : in) {
      if (seg.id >= 0) {
        out.push_back(seg);
        continue;
      }
      size_t start = 0;
      for (size_t i = 0; i < seg.text.size();) {
        int32_t id = -1;
        const size_t n = trie.longest(seg.text, i, &id);
        if (n == 0) {
          ++i;
          continue;
        }
        if (i > start) out.push_back({seg.text.substr(start, i - start), -1});
        out.push_back({seg.text.substr(i, n), id});
        i += n;
        start = i;
      }
      if (start < seg.text.size()) out.push_back({seg.text.substr(start), -1});
    }
    return out;
  };
  return split(*normalized_added_, split(*raw_added_, {{text, -1}}));
}

void BpeTokenizer::encode_piece(std::string_view byte_level, std::vector<int32_t>& out) const {
  std::vector<int32_t> symbols;
  for (size_t at = 0, n = 0; at < byte_level.size(); at += n) {
    const char32_t c = next_code_point(byte_level, at, &n);
    const int32_t id = token_to_id(std::string(byte_level.substr(at, n)));
    // A vocabulary without some byte's token (a byte-level BPE should have all 256) cannot spell text holding it.
    if (id < 0)
      throw InputError(fmt::format("{} has no token for the byte 0x{:02x} of this text, so the text cannot be encoded: "
                                   "remove that character or use a tokenizer with every byte", source_,
                                   static_cast<int>(char_byte_.at(c))));
    symbols.push_back(id);
  }
  // The lowest-ranked adjacent pair is merged first, the leftmost of equal ones first, as the tokenizers library
  // does: the candidate pairs wait in a heap by (rank, position) and the symbols form a linked list, so a piece of
  // n symbols takes O(n log n) (rescanning the piece for each merge would take O(n^2): a long run of CJK text is
  // one piece). A heap entry is stale once either of its symbols has been merged away or changed.
  const auto n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) next[i] = i + 1, prev[i] = i - 1;  // next == n: the end
  struct Candidate {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto offer = [&](int32_t left) {
    if (left < 0 || next[left] >= n) return;
    const auto it = merges_.find(pair_key(symbols[left], symbols[next[left]]));
    if (it != merges_.end()) heap.push({it->second.first, left, symbols[left], symbols[next[left]]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.left];
    if (!alive[c.left] || right >= n || symbols[c.left] != c.left_id || symbols[right] != c.right_id) continue;
    symbols[c.left] = merges_.at(pair_key(c.left_id, c.right_id)).second;
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] < n) prev[next[right]] = c.left;
    offer(prev[c.left]);
    offer(c.left);
  }
  for (int32_t i = 0; i < n; i = next[i]) out.push_back(symbols[i]);
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> pieces{text}, next;
  for (const Regex& split : splits_) {
    next.clear();
    for (std::string_view piece : pieces) {
      size_t last = 0;
      split.for_each_match(piece, [&](size_t begin, size_t end) {
        if (begin > last) next.push_back(piece.substr(last, begin - last));
        next.push_back(piece.substr(begin, end - begin));
        last = end;
      });
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    pieces.swap(next);
  }
  std::string mapped;
  for (std::string_view piece : pieces) {
    mapped.clear();
    for (char c : piece) mapped += byte_char_[static_cast<uint8_t>(c)];
    encode_piece(mapped, out);
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const { return encode_parallel(text, 1); }

void BpeTokenizer::check_text_length(std::string_view text) const {
  DI_INPUT_CHECK(max_text_bytes_ == 0 || static_cast<int64_t>(text.size()) <= max_text_bytes_,
                 "text of {} bytes is too long: it cannot encode to the at most {} tokens allowed (no token of {} "
                 "spells more than {} bytes)", text.size(), max_text_bytes_ / max_token_bytes_, source_,
                 max_token_bytes_);
}

std::vector<int32_t> BpeTokenizer::encode_plain(std::string_view text) const {
  check_text_length(text);
  DI_INPUT_CHECK(is_valid_utf8(text), "text to encode is not valid UTF-8");
  std::vector<int32_t> ids;
  encode_text(text, ids);
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode_parallel(std::string_view text, int threads) const {
  check_text_length(text);
  DI_INPUT_CHECK(is_valid_utf8(text), "text to encode is not valid UTF-8");
  const std::vector<Segment> segments = split_added(text);
  auto encode_segments = [&](size_t first, size_t last) {
    std::vector<int32_t> ids;
    for (size_t s = first; s < last; ++s) {
      if (segments[s].id >= 0) ids.push_back(segments[s].id);
      else encode_text(segments[s].text, ids);
    }
    return ids;
  };
  threads = std::max(1, std::min<int>(threads, static_cast<int>(segments.size())));
  if (threads == 1) return encode_segments(0, segments.size());
  // Contiguous runs of segments of about equal bytes, one per thread; their ids concatenated in order.
  std::vector<size_t> bounds{0};
  const size_t share = text.size() / threads + 1;
  size_t bytes = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    bytes += segments[s].text.size();
    if (bytes >= share * bounds.size() && static_cast<int>(bounds.size()) < threads) bounds.push_back(s + 1);
  }
  if (bounds.back() != segments.size()) bounds.push_back(segments.size());
  std::vector<std::future<std::vector<int32_t>>> parts;
  for (size_t b = 0; b + 1 < bounds.size(); ++b)
    parts.push_back(std::async(std::launch::async, encode_segments, bounds[b], bounds[b + 1]));
  std::vector<int32_t> ids;
  for (auto& part : parts) {
    const std::vector<int32_t> p = part.get();
    ids.insert(ids.end(), p.begin(), p.end());
  }
  return ids;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  DI_INPUT_CHECK(id >= 0 && id < vocab_size(), "token id {} outside the vocabulary of {}", id, vocab_size());
  const std::string& token = id_to_token_[id];
  // A token whose every character is in the byte map decodes to those bytes, any other to its own text.
  std::string mapped;
  for (size_t at = 0, n = 0; at < token.size(); at += n) {
    const auto it = char_byte_.find(next_code_point(token, at, &n));
    if (it == char_byte_.end()) return token;
    mapped += static_cast<char>(it->second);
  }
  return mapped;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    DI_INPUT_CHECK(id >= 0, "token id {} is negative", id);
    if (id >= vocab_size()) continue;  // a model's padding id: no text (as the tokenizers library decodes it)
    if (skip_special_tokens && is_special_[id]) continue;
    bytes += token_bytes(id);
  }
  return utf8_lossy(bytes);
}

}  // namespace deepinfer::text

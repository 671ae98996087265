// A byte-level BPE tokenizer that loads a Hugging Face tokenizer.json of the DeepSeek family and encodes and
// decodes as Hugging Face's tokenizers does:
//   1. added tokens are cut out first (leftmost-longest; those with `normalized: false`, then the others in what
//      remains), each its own id;
//   2. the text between them goes through the pre-tokenizer's Split regexes (behaviour Isolated: every match and
//      every gap between matches a piece; each Split applies to the pieces of the one before), then the ByteLevel
//      map (each byte as a printable character, GPT-2's table);
//   3. each piece is merged by BPE (the lowest-ranked adjacent pair first, every occurrence left to right) into
//      vocabulary ids.
// Decoding maps tokens back to bytes (an added token, or any token with a character outside the byte map, as its
// UTF-8 text) and replaces invalid UTF-8 as Rust's from_utf8_lossy does. Supported: an empty (or no) normalizer,
// a Sequence of Split/ByteLevel pre-tokenizers (ByteLevel without its own regex or prefix space), a BPE model
// without dropout, unk or subword affixes, a ByteLevel decoder; anything else is refused at load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "src/text/regex.h"

namespace deepinfer::text {

class BpeTokenizer {
 public:
  static BpeTokenizer load(const std::filesystem::path& tokenizer_json);  // InputError naming the file and key

  // `text` must be valid UTF-8 (InputError otherwise). Special tokens in the text are matched as such.
  std::vector<int32_t> encode(std::string_view text) const;
  // The same ids, the text between added tokens encoded on up to `threads` threads.
  std::vector<int32_t> encode_parallel(std::string_view text, int threads) const;
  // `text` as plain text: added-token spellings in it are not matched (a chat prompt's text between its special
  // tokens, so that a user who types "<｜User｜>" gets the characters, not the token).
  std::vector<int32_t> encode_plain(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // One token's bytes as decoding joins them (maybe part of a UTF-8 character).
  std::string token_bytes(int32_t id) const;
  bool is_special(int32_t id) const { return is_special_.at(id); }
  bool is_added(int32_t id) const { return is_added_.at(id); }

  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  // Text that must encode to at most `max_tokens` ids is refused by its length in bytes before any work where it
  // cannot (every token spells at most max_token_bytes() bytes): a prompt far past the model's length costs
  // nothing to refuse. 0: no limit.
  void limit_text(int64_t max_tokens) { max_text_bytes_ = max_tokens > 0 ? max_tokens * max_token_bytes_ : 0; }
  int64_t max_token_bytes() const { return max_token_bytes_; }
  void check_text_length(std::string_view text) const;  // InputError past limit_text's bound
  const std::string& id_to_token(int32_t id) const { return id_to_token_.at(id); }
  // An added token's id, else the vocabulary's (byte-level spelling); -1 when the string is no token.
  int32_t token_to_id(const std::string& token) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special;
  };
  struct Segment {  // a piece of the input: an added token's id, or text to pre-tokenize (id -1)
    std::string_view text;
    int32_t id;
  };
  struct Trie;  // byte trie over added tokens' contents, for the longest match at a position

  BpeTokenizer() = default;
  // load()'s parts, each an InputError naming the file and the part of it that is wrong.
  void read_pipeline(const nlohmann::json& j, const std::string& source);
  void read_byte_map();
  void read_vocab(const nlohmann::json& model, const std::string& source);
  void read_merges(const nlohmann::json& model, const std::string& source);
  void read_added_tokens(const nlohmann::json& j, const std::string& source);
  void set_token(int32_t id, const std::string& token);
  std::vector<Segment> split_added(std::string_view text) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view byte_level, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;  // the BPE model's, byte-level strings
  std::vector<std::string> id_to_token_;            // model tokens and added tokens' contents
  std::vector<bool> is_added_, is_special_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left id, right id) -> (rank, merged id)
  std::vector<AddedToken> added_;
  std::shared_ptr<const Trie> raw_added_, normalized_added_;  // `normalized: false` ones, and the others
  std::vector<Regex> splits_;                                 // the pre-tokenizer's Split patterns, in order
  std::string byte_char_[256];                                // byte -> its ByteLevel character (UTF-8)
  std::string source_;                                        // the tokenizer.json it was loaded from
  int64_t max_token_bytes_ = 1;  // the longest token's bytes
  int64_t max_text_bytes_ = 0;   // limit_text's bound (0: none)
  std::unordered_map<char32_t, uint8_t> char_byte_;           // and back
};

}  // namespace deepinfer::text

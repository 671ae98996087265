// Integers a JSON reader cannot hold exactly. A parsed document keeps an integer literal beyond 64 bits (past
// 2^64 - 1, or below -2^63) as a floating-point number, so after parsing nothing tells `18446744073709551616` from
// `1.8446744073709552e19`: the literal is looked for in the text itself. The DeepSeek API refuses such requests
// ("integer is outside the JSON number range"), and so do chat requests here.
#pragma once

#include <string>
#include <string_view>

namespace deepinfer {

// The first integer literal of `text` (a number without fraction or exponent, outside strings) that no 64-bit
// integer holds, as written; empty when there is none. Malformed text is scanned all the same.
std::string json_integer_beyond_64_bits(std::string_view text);

}  // namespace deepinfer

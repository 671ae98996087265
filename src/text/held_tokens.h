// Token texts held back while they may begin a marker (a stop sequence, a DSML tag): the streaming parsers send
// them on whole, one piece a token, once the marker's earliest possible start lies past them.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::text {

// Sends (through `send`, in order) and drops the held texts that end at or before `until`, a position in their
// joined text.
template <class Send>
void release_held_before(std::vector<std::string>& held, size_t until, Send&& send) {
  size_t end = 0, taken = 0;
  for (std::string& t : held) {
    if (end + t.size() > until) break;
    end += t.size();
    send(std::move(t));
    ++taken;
  }
  held.erase(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(taken));
}

}  // namespace deepinfer::text

#pragma once
// Streams token bytes as text without ever splitting a UTF-8 character: byte-level BPE tokens
// can end in the middle of a multi-byte sequence (emoji are often 2-3 tokens).
#include <string>
#include <string_view>

namespace specula {

class Utf8Stream {
 public:
  // Appends bytes and returns the longest prefix of pending bytes that ends on a character
  // boundary. Invalid bytes are passed through as they are once they cannot start a character.
  std::string push(std::string_view bytes);
  // Everything still pending (an unfinished sequence at the end of generation).
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace specula

#include "engine/text/utf8_stream.h"

namespace specula {
namespace {

// Expected length of a sequence from its lead byte; 0 for a continuation byte.
int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return lead >= 0xC0 ? 1 : 0;  // 0xF8..0xFF: invalid, emit as is
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  // Find the start of the last (possibly incomplete) sequence: at most 3 bytes back.
  size_t cut = pending_.size();
  for (size_t back = 1; back <= 4 && back <= pending_.size(); ++back) {
    const auto byte = static_cast<unsigned char>(pending_[pending_.size() - back]);
    const int len = sequence_length(byte);
    if (len == 0) continue;  // continuation byte: keep looking for the lead
    if (static_cast<size_t>(len) > back) cut = pending_.size() - back;  // incomplete
    break;
  }
  std::string ready = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return ready;
}

std::string Utf8Stream::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace specula

#include "engine/text/utf8_stream.h"

#include <gtest/gtest.h>

namespace specula {
namespace {

TEST(Utf8Stream, HoldsBackAnIncompleteCharacterUntilItCompletes) {
  Utf8Stream s;
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes
  EXPECT_EQ(s.push("hi "), "hi ");
  EXPECT_EQ(s.push(emoji.substr(0, 1)), "");
  EXPECT_EQ(s.push(emoji.substr(1, 2)), "");
  EXPECT_EQ(s.push(emoji.substr(3) + "!"), emoji + "!");
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Stream, FlushReturnsAnUnfinishedTail) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a\xC3"), "a");
  EXPECT_EQ(s.flush(), "\xC3");
}

TEST(Utf8Stream, StrayContinuationBytesPassThrough) {
  Utf8Stream s;
  EXPECT_EQ(s.push("\x80\x80x"), "\x80\x80x");
}

}  // namespace
}  // namespace specula

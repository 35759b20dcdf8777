#pragma once
// Code-point classes for the pre-tokenizer regexes (\p{L}, \p{N}, \s). std::regex has no
// \p{..} and ICU is far too heavy a dependency for three predicates, so the table is generated
// from Unicode data (tools/reference/gen_unicode_tables.py) and matched by hand.
#include <cstddef>
#include <cstdint>

namespace specula::unicode {

enum class CharClass : uint8_t { Other, Letter, Number, Space };

struct CodePointRange {
  char32_t first;
  char32_t last;  // inclusive
  CharClass cls;
};

// Sorted, non-overlapping; generated in unicode_tables.cpp.
extern const CodePointRange kCodePointRanges[];
extern const std::size_t kCodePointRangeCount;

// Class of one code point; anything unlisted (punctuation, symbols, marks, controls,
// unassigned) is Other.
CharClass classify(char32_t cp);

}  // namespace specula::unicode

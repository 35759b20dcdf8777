// Tokenizer::from_gguf: the tokenizer.* metadata llama.cpp's converter writes. Kept apart from
// tokenizer.cpp so programs that only read tokenizer.json do not link the GGUF reader.
#include "engine/formats/gguf.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace specula {
namespace {

// llama.cpp token types (tokenizer.ggml.token_type).
enum GgufTokenType : int64_t {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

}  // namespace

Expected<Tokenizer> Tokenizer::from_gguf(const GgufFile& gguf) {
  const std::string origin = gguf.path().string();
  auto model = gguf.get_string("tokenizer.ggml.model");
  if (!model) return make_error(origin + ": " + model.error().message);
  if (model.value() != "gpt2") {
    return make_error(origin + ": unsupported tokenizer model '" + model.value() +
                      "' (only 'gpt2' byte-level BPE)");
  }

  TokenizerSpec spec;
  spec.origin = origin;
  auto tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return make_error(origin + ": tokenizer.ggml.tokens missing or not a string array");
  spec.tokens = std::move(*tokens);
  spec.kinds.assign(spec.tokens.size(), TokenKind::Normal);

  if (const GgufValue* types = gguf.find("tokenizer.ggml.token_type")) {
    const GgufArray* array = types->as_array();
    if (!array || array->items.size() != spec.tokens.size()) {
      return make_error(origin + ": tokenizer.ggml.token_type is not an array of " +
                        std::to_string(spec.tokens.size()) + " integers");
    }
    for (size_t i = 0; i < array->items.size(); ++i) {
      const auto type = array->items[i].as_int();
      if (!type) {
        return make_error(origin + ": tokenizer.ggml.token_type[" + std::to_string(i) +
                          "] is not an integer");
      }
      switch (*type) {
        case kControl: spec.kinds[i] = TokenKind::Special; break;
        case kUserDefined: spec.kinds[i] = TokenKind::UserDefined; break;
        case kUnknown:
        case kUnused: spec.kinds[i] = TokenKind::Unused; break;
        default: spec.kinds[i] = TokenKind::Normal; break;  // kNormal, kByte
      }
    }
  }

  auto merges = gguf.get_string_array("tokenizer.ggml.merges");
  if (!merges) return make_error(origin + ": tokenizer.ggml.merges missing or not a string array");
  spec.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    const size_t space = m.find(' ');
    if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos) {
      return make_error(origin + ": tokenizer.ggml.merges[" + std::to_string(i) + "] '" + m +
                        "' is not two tokens separated by one space");
    }
    spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }

  auto pre = gguf.get_string("tokenizer.ggml.pre");
  const std::string pre_name = pre ? pre.value() : std::string("(none)");
  auto kind = pre_tokenizer_from_name(pre_name);
  if (!kind) {
    return make_error(origin + ": unsupported pre-tokenizer '" + pre_name +
                      "' in tokenizer.ggml.pre (supported: gpt2, smollm, llama3/llama-bpe, qwen2)");
  }
  spec.pre_tokenizer = *kind;
  // llama.cpp looks whole words up before merging for Llama-3, as its tokenizer.json says.
  spec.ignore_merges = *kind == PreTokenizerKind::Llama3;

  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &spec.bos_id},
                         std::pair{"tokenizer.ggml.eos_token_id", &spec.eos_id}}) {
    auto value = gguf.get_int(key);
    if (!value) continue;
    if (value.value() < 0 || value.value() >= static_cast<int64_t>(spec.tokens.size())) {
      return make_error(origin + ": " + key + " = " + std::to_string(value.value()) +
                        " outside the vocabulary (" + std::to_string(spec.tokens.size()) +
                        " tokens)");
    }
    *id = static_cast<int32_t>(value.value());
  }
  if (const GgufValue* add_bos = gguf.find("tokenizer.ggml.add_bos_token")) {
    spec.add_bos = add_bos->as_bool().value_or(false);
  }
  if (auto tmpl = gguf.get_string("tokenizer.chat_template")) {
    spec.chat_template = std::move(tmpl.value());
  }
  return Impl::build(std::move(spec));
}

}  // namespace specula

#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "engine/tokenizer/tokenizer_impl.h"

namespace specula {

Expected<Tokenizer> Tokenizer::Impl::build(TokenizerSpec spec) {
  auto impl = std::make_unique<Impl>();
  impl->origin = spec.origin;
  const size_t n = spec.tokens.size();
  if (n == 0) return make_error(spec.origin + ": empty vocabulary");
  if (spec.kinds.size() != n) {
    return make_error(spec.origin + ": " + std::to_string(spec.kinds.size()) +
                      " token types for " + std::to_string(n) + " tokens");
  }

  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(n * 2);
  impl->token_bytes.resize(n);
  impl->added_by_first_byte.resize(256);
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = spec.tokens[id];
    const TokenKind kind = spec.kinds[id];
    if (kind == TokenKind::Special || kind == TokenKind::UserDefined) {
      impl->token_bytes[id] = text;
      if (!text.empty()) {
        impl->added_by_first_byte[static_cast<unsigned char>(text[0])].push_back(
            {text, static_cast<int32_t>(id), kind == TokenKind::Special});
      }
    } else {
      // A normal token spelled outside the byte mapping (rare) decodes to its own text.
      impl->token_bytes[id] = byte_level_decode(text).value_or(text);
    }
    if (kind != TokenKind::Unused || !text.empty()) vocab.emplace(text, static_cast<int32_t>(id));
  }
  for (auto& bucket : impl->added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [](const AddedToken& a, const AddedToken& b) {
      return a.text.size() > b.text.size();
    });
  }

  auto bpe = BpeModel::build(vocab, spec.merges, spec.ignore_merges);
  if (!bpe) return make_error(spec.origin + ": " + bpe.error().message);
  impl->bpe = std::move(bpe.value());

  auto check_id = [&](int32_t id, const char* what) -> Status {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      return make_error(spec.origin + ": " + what + " id " + std::to_string(id) +
                        " outside the vocabulary (" + std::to_string(n) + " tokens)");
    }
    return {};
  };
  if (auto s = check_id(spec.bos_id, "bos"); !s) return s.error();
  if (auto s = check_id(spec.eos_id, "eos"); !s) return s.error();

  impl->pre_tokenizer = spec.pre_tokenizer;
  impl->bos_id = spec.bos_id;
  impl->eos_id = spec.eos_id;
  impl->add_bos = spec.add_bos;
  impl->token_text = std::move(spec.tokens);
  impl->kinds = std::move(spec.kinds);
  impl->chat_template = std::move(spec.chat_template);
  impl->chat_kind = detect_chat_template(impl->chat_template, &impl->default_system);

  if (impl->eos_id >= 0) impl->end_of_generation.push_back(impl->eos_id);
  for (const char* stop : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"}) {
    if (int32_t id = impl->find_token(stop); id >= 0) impl->end_of_generation.push_back(id);
  }
  std::sort(impl->end_of_generation.begin(), impl->end_of_generation.end());
  impl->end_of_generation.erase(
      std::unique(impl->end_of_generation.begin(), impl->end_of_generation.end()),
      impl->end_of_generation.end());

  Tokenizer tokenizer;
  tokenizer.impl_ = std::move(impl);
  return tokenizer;
}

int32_t Tokenizer::Impl::find_token(std::string_view text) const {
  if (text.empty()) return -1;
  for (const AddedToken& t : added_by_first_byte[static_cast<unsigned char>(text[0])]) {
    if (t.text == text) return t.id;
  }
  for (size_t id = 0; id < token_text.size(); ++id) {
    if (token_text[id] == text && kinds[id] != TokenKind::Unused) return static_cast<int32_t>(id);
  }
  return -1;
}

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {
  impl_->added_by_first_byte.resize(256);
}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<std::string_view> words;
  auto encode_plain = [&](std::string_view plain) {
    if (plain.empty()) return;
    words.clear();
    pre_tokenize(impl_->pre_tokenizer, plain, words);
    for (std::string_view w : words) impl_->bpe.encode_word(w, ids);
  };

  // Added tokens are cut out first (leftmost, then longest), and each stretch between them
  // is pre-tokenized on its own, as HF tokenizers' AddedVocabulary does.
  size_t plain_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& t : impl_->added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      if (t.special && !parse_special) continue;
      if (text.compare(i, t.text.size(), t.text) == 0) {
        hit = &t;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    encode_plain(text.substr(plain_start, i - plain_start));
    ids.push_back(hit->id);
    i += hit->text.size();
    plain_start = i;
  }
  encode_plain(text.substr(plain_start));
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size()) out += impl_->token_bytes[static_cast<size_t>(id)];
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->token_bytes[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_bytes.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(impl_->end_of_generation.begin(), impl_->end_of_generation.end(), id);
}

std::string_view Tokenizer::pre_tokenizer_name() const {
  return specula::pre_tokenizer_name(impl_->pre_tokenizer);
}

ChatTemplateKind Tokenizer::chat_template() const { return impl_->chat_kind; }

std::string Tokenizer::summary() const {
  std::ostringstream s;
  size_t special = 0;
  size_t user = 0;
  for (TokenKind k : impl_->kinds) {
    special += k == TokenKind::Special;
    user += k == TokenKind::UserDefined;
  }
  auto name = [&](int32_t id) {
    return id >= 0 ? impl_->token_text[static_cast<size_t>(id)] + " (" + std::to_string(id) + ")"
                   : std::string("none");
  };
  const char* chat = impl_->chat_kind == ChatTemplateKind::ChatML   ? "ChatML"
                     : impl_->chat_kind == ChatTemplateKind::Llama3 ? "Llama-3"
                                                                    : "none";
  s << "byte-level BPE, " << vocab_size() << " tokens (" << special << " special, " << user
    << " user-defined), " << impl_->bpe.merge_count() << " merges"
    << (impl_->bpe.ignore_merges() ? " (whole-word lookup first)" : "") << ", pre-tokenizer "
    << pre_tokenizer_name() << ", bos " << name(impl_->bos_id)
    << (impl_->add_bos ? " added to prompts" : " not added") << ", eos " << name(impl_->eos_id)
    << ", " << impl_->end_of_generation.size() << " end-of-generation tokens, chat template "
    << chat << ".";
  return s.str();
}

}  // namespace specula

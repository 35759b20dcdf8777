// Chat templates. Models ship Jinja templates; rather than embed a Jinja interpreter, the
// template's family is recognised from its markers and rendered natively. Output must equal
// transformers' apply_chat_template (tests/data/tokenizer/chat_goldens.json).
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer_impl.h"

namespace specula {
namespace {

// Python's str.strip() set (Jinja's `trim` filter): str.isspace() code points.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// Decodes the character starting (or, backwards, ending) at a byte offset; returns its
// length in bytes, or 0 when the bytes there are not a plain 1-3 byte sequence.
size_t char_at(std::string_view s, size_t i, char32_t* cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  if ((b & 0xE0) == 0xC0 && i + 1 < s.size()) {
    *cp = (static_cast<char32_t>(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
    return 2;
  }
  if ((b & 0xF0) == 0xE0 && i + 2 < s.size()) {
    *cp = (static_cast<char32_t>(b & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    return 3;
  }
  return 0;  // every Python whitespace character is below U+10000
}

std::string_view python_strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    char32_t cp = 0;
    const size_t len = char_at(s, begin, &cp);
    if (len == 0 || !is_python_space(cp)) break;
    begin += len;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // back up to the lead byte
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    char32_t cp = 0;
    const size_t len = char_at(s, start, &cp);
    if (len != end - start || !is_python_space(cp)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

}  // namespace

ChatTemplateKind detect_chat_template(std::string_view source, std::string* default_system) {
  default_system->clear();
  if (source.find("<|im_start|>") != std::string_view::npos) {
    // SmolLM2: {% if loop.first and messages[0]['role'] != 'system' %}
    //            {{ '<|im_start|>system\n...<|im_end|>\n' }}{% endif %}
    const size_t guard = source.find("!= 'system'");
    if (guard != std::string_view::npos) {
      const std::string_view open = "<|im_start|>system";
      const size_t start = source.find(open, guard);
      const size_t stop =
          start == std::string_view::npos ? start : source.find("<|im_end|>", start);
      if (stop != std::string_view::npos) {
        std::string_view body = source.substr(start + open.size(), stop - start - open.size());
        if (body.starts_with("\n")) {
          body.remove_prefix(1);
        } else if (body.starts_with("\\n")) {  // written as an escape inside the Jinja string
          body.remove_prefix(2);
        }
        *default_system = std::string(body);
      }
    }
    return ChatTemplateKind::ChatML;
  }
  if (source.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplateKind::Llama3;
  return ChatTemplateKind::None;
}

std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) const {
  std::string out;
  switch (impl_->chat_kind) {
    case ChatTemplateKind::ChatML:
      if (!messages.empty() && messages[0].role != "system" && !impl_->default_system.empty()) {
        out += "<|im_start|>system\n" + impl_->default_system + "<|im_end|>\n";
      }
      for (const ChatMessage& m : messages) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatTemplateKind::Llama3:
      // Meta's template: BOS before the first turn, contents trimmed.
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += "<|begin_of_text|>";
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
        out += python_strip(messages[i].content);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplateKind::None:
      // No template: the contents back to back, which is what a base model is prompted with.
      for (const ChatMessage& m : messages) out += m.content;
      break;
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode_prompt(const std::string& text, bool chat) const {
  std::vector<int32_t> prompt;
  if (add_bos() && bos_id() >= 0) prompt.push_back(bos_id());
  std::vector<int32_t> ids;
  if (chat) {
    const ChatMessage user{"user", text};
    ids = encode(apply_chat_template(std::span(&user, 1), /*add_generation_prompt=*/true), /*parse_special=*/true);
  } else {
    ids = encode(text, /*parse_special=*/false);
  }
  prompt.insert(prompt.end(), ids.begin(), ids.end());
  return prompt;
}

}  // namespace specula

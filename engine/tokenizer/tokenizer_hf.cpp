// Tokenizer::from_hf_dir: tokenizer.json (+ tokenizer_config.json, chat_template.jinja).
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer_impl.h"

namespace specula {
namespace {

using nlohmann::json;

Expected<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return make_error(path.string() + ": read failed");
  return s.str();
}

Expected<json> read_json(const std::filesystem::path& path) {
  auto text = read_file(path);
  if (!text) return text.error();
  json doc = json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error(path.string() + ": not valid JSON");
  if (!doc.is_object()) return make_error(path.string() + ": top level is not a JSON object");
  return doc;
}

std::string type_of(const json& node) {
  if (!node.is_object()) return node.is_null() ? "null" : "(not an object)";
  auto t = node.find("type");
  return t != node.end() && t->is_string() ? t->get<std::string>() : "(no type)";
}

bool is_byte_level(const json& node, bool use_regex) {
  if (type_of(node) != "ByteLevel") return false;
  if (node.value("add_prefix_space", false)) return false;
  return node.value("use_regex", true) == use_regex;
}

// Maps the pre_tokenizer node to one of the hand-written pre-tokenizers, matching the
// configurations those models' tokenizer.json files use exactly.
Expected<PreTokenizerKind> detect_pre_tokenizer(const json& node, const std::string& origin) {
  if (is_byte_level(node, true)) return PreTokenizerKind::Gpt2;
  if (type_of(node) == "Sequence" && node.contains("pretokenizers") &&
      node["pretokenizers"].is_array() && node["pretokenizers"].size() == 2) {
    const json& first = node["pretokenizers"][0];
    const json& second = node["pretokenizers"][1];
    if (type_of(first) == "Digits" && first.value("individual_digits", false) &&
        is_byte_level(second, true)) {
      return PreTokenizerKind::SmolLm;
    }
    if (type_of(first) == "Split" && is_byte_level(second, false) &&
        first.value("behavior", "") == "Isolated" && !first.value("invert", false) &&
        first.contains("pattern") && first["pattern"].is_object()) {
      const std::string regex = first["pattern"].value("Regex", "");
      if (regex == kLlama3SplitRegex) return PreTokenizerKind::Llama3;
      if (regex == kQwen2SplitRegex) return PreTokenizerKind::Qwen2;
    }
  }
  std::string shown = node.dump();
  if (shown.size() > 300) shown = shown.substr(0, 300) + "...";
  return make_error(origin + ": unsupported pre-tokenizer " + shown +
                    " (supported: gpt2, smollm, llama3, qwen2 configurations)");
}

// bos_token / eos_token in tokenizer_config.json: a string, {"content": ...}, or null.
std::string token_content(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return {};
}

// Whether tokenizer.json's post_processor (TemplateProcessing, possibly inside a Sequence)
// starts every single-sequence encoding with `token`, as Llama-3's does with its BOS.
bool post_processor_prepends(const json& doc, const std::string& token) {
  auto it = doc.find("post_processor");
  if (it == doc.end() || !it->is_object()) return false;
  std::vector<const json*> nodes{&*it};
  if (type_of(*it) == "Sequence" && it->contains("processors") && (*it)["processors"].is_array()) {
    for (const json& p : (*it)["processors"]) nodes.push_back(&p);
  }
  for (const json* node : nodes) {
    if (type_of(*node) != "TemplateProcessing" || !node->contains("single")) continue;
    const json& single = (*node)["single"];
    if (!single.is_array() || single.empty() || !single[0].is_object()) continue;
    auto special = single[0].find("SpecialToken");
    if (special != single[0].end() && special->is_object() && special->value("id", "") == token) {
      return true;
    }
  }
  return false;
}

Status read_model(const json& model, const std::string& origin, TokenizerSpec& spec) {
  if (!model.is_object()) return make_error(origin + ": missing \"model\" object");
  const std::string type = model.contains("type") ? type_of(model) : "BPE";
  if (type != "BPE") {
    return make_error(origin + ": unsupported tokenizer model type '" + type +
                      "' (only byte-level BPE)");
  }
  if (model.value("byte_fallback", false)) {
    return make_error(origin + ": BPE with byte_fallback (SentencePiece style) is unsupported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return make_error(origin + ": BPE " + key + " is unsupported");
    }
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return make_error(origin + ": model.vocab is missing or not an object");
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return make_error(origin + ": model.merges is missing or not an array");
  }
  spec.ignore_merges = model.value("ignore_merges", false);

  for (const auto& [text, id_node] : model["vocab"].items()) {
    if (!id_node.is_number_integer() || id_node.get<int64_t>() < 0 ||
        id_node.get<int64_t>() > (1 << 24)) {
      return make_error(origin + ": model.vocab['" + text + "'] is not a valid token id");
    }
    const auto id = static_cast<size_t>(id_node.get<int64_t>());
    if (id >= spec.tokens.size()) {
      spec.tokens.resize(id + 1);
      spec.kinds.resize(id + 1, TokenKind::Unused);
    }
    spec.tokens[id] = text;
    spec.kinds[id] = TokenKind::Normal;
  }

  const json& merges = model["merges"];
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return make_error(origin + ": merge " + std::to_string(i) + " '" + s +
                          "' is not two tokens separated by one space");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return make_error(origin + ": merge " + std::to_string(i) + " is neither \"a b\" nor [a, b]");
    }
  }
  return {};
}

Status read_added_tokens(const json& doc, const std::string& origin, TokenizerSpec& spec) {
  auto it = doc.find("added_tokens");
  if (it == doc.end() || it->is_null()) return {};
  if (!it->is_array()) return make_error(origin + ": added_tokens is not an array");
  for (const json& t : *it) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return make_error(origin + ": added token without integer id and string content: " +
                        t.dump());
    }
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id > (1 << 24)) {
      return make_error(origin + ": added token id " + std::to_string(id) + " out of range");
    }
    const auto index = static_cast<size_t>(id);
    if (index >= spec.tokens.size()) {
      spec.tokens.resize(index + 1);
      spec.kinds.resize(index + 1, TokenKind::Unused);
    }
    spec.tokens[index] = t["content"].get<std::string>();
    spec.kinds[index] = t.value("special", false) ? TokenKind::Special : TokenKind::UserDefined;
  }
  return {};
}

}  // namespace

Expected<Tokenizer> Tokenizer::from_hf_dir(const std::filesystem::path& dir) {
  const std::filesystem::path json_path = dir / "tokenizer.json";
  const std::string origin = json_path.string();
  auto doc_or = read_json(json_path);
  if (!doc_or) return doc_or.error();
  const json& doc = doc_or.value();

  TokenizerSpec spec;
  spec.origin = origin;
  try {
    if (auto normalizer = doc.find("normalizer");
        normalizer != doc.end() && !normalizer->is_null()) {
      return make_error(origin + ": unsupported normalizer '" + type_of(*normalizer) +
                        "' (byte-level BPE here takes text unnormalized)");
    }
    if (auto s = read_model(doc.contains("model") ? doc["model"] : json(), origin, spec); !s) {
      return s.error();
    }
    if (auto s = read_added_tokens(doc, origin, spec); !s) return s.error();
    auto pre = detect_pre_tokenizer(doc.contains("pre_tokenizer") ? doc["pre_tokenizer"] : json(),
                                    origin);
    if (!pre) return pre.error();
    spec.pre_tokenizer = pre.value();

    const std::filesystem::path config_path = dir / "tokenizer_config.json";
    std::error_code ec;
    if (std::filesystem::exists(config_path, ec)) {
      auto config_or = read_json(config_path);
      if (!config_or) return config_or.error();
      const json& config = config_or.value();
      const std::string bos = token_content(config, "bos_token");
      const std::string eos = token_content(config, "eos_token");
      for (size_t id = 0; id < spec.tokens.size(); ++id) {
        if (spec.kinds[id] == TokenKind::Unused) continue;
        if (spec.bos_id < 0 && !bos.empty() && spec.tokens[id] == bos) {
          spec.bos_id = static_cast<int32_t>(id);
        }
        if (spec.eos_id < 0 && !eos.empty() && spec.tokens[id] == eos) {
          spec.eos_id = static_cast<int32_t>(id);
        }
      }
      if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
        spec.add_bos = config["add_bos_token"].get<bool>();
      } else {
        spec.add_bos = !bos.empty() && post_processor_prepends(doc, bos);
      }
      if (auto t = config.find("chat_template"); t != config.end()) {
        if (t->is_string()) {
          spec.chat_template = t->get<std::string>();
        } else if (t->is_array()) {  // [{"name": "default", "template": "..."}, ...]
          for (const json& entry : *t) {
            if (entry.is_object() && entry.value("name", "") == "default") {
              spec.chat_template = entry.value("template", "");
            }
          }
        }
      }
    }
    if (spec.chat_template.empty()) {
      const std::filesystem::path jinja = dir / "chat_template.jinja";
      if (std::filesystem::exists(jinja, ec)) {
        auto text = read_file(jinja);
        if (!text) return text.error();
        spec.chat_template = std::move(text.value());
      }
    }
  } catch (const json::exception& e) {
    return make_error(origin + ": unexpected JSON structure: " + e.what());
  }
  return Impl::build(std::move(spec));
}

}  // namespace specula

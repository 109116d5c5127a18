#include "server/tokenizer.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/json_field.h"
#include "server/byte_level.h"
#include "server/utf8.h"

namespace moeserve::server {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  check(file.good() && !std::filesystem::is_directory(path), "{}: cannot open file", path.string());
  std::string text(static_cast<size_t>(file.tellg()), '\0');
  file.seekg(0);
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  check(file.good(), "{}: read failed", path.string());
  return text;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path.string(), e.what());
  }
}

// Only identity normalizers are supported: null or (nested) empty Sequences.
void check_normalizer(const nlohmann::json& json, const std::string& where) {
  if (json.is_null()) return;
  check(json.is_object() && json.contains("type") && json["type"].is_string(),
        "{}: expected an object with a string \"type\"", where);
  const auto type = json["type"].get<std::string>();
  check(type == "Sequence", "{}.type: unsupported normalizer '{}' (only an empty Sequence or null is supported)", where,
        type);
  const auto& list = json_field(json, "normalizers");
  check(list.is_null() || list.is_array(), "{}.normalizers: expected an array", where);
  if (list.is_null()) return;
  for (size_t i = 0; i < list.size(); ++i) check_normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i));
}

void check_decoder(const nlohmann::json& json) {
  check(json.is_object() && json.contains("type") && json["type"].is_string(),
        "decoder: expected an object with a string \"type\" (ByteLevel)");
  const auto type = json["type"].get<std::string>();
  check(type == "ByteLevel", "decoder.type: unsupported decoder '{}' (supported: ByteLevel)", type);
}

// bos_token / eos_token in tokenizer_config.json: a string or an AddedToken object with "content".
std::string config_token(const nlohmann::json* config, const char* field) {
  if (config == nullptr || !config->contains(field) || (*config)[field].is_null()) return "";
  const auto& value = (*config)[field];
  if (value.is_string()) return value.get<std::string>();
  check(value.is_object() && value.contains("content") && value["content"].is_string(),
        "tokenizer_config.json: {}: expected a string or an object with a string \"content\"", field);
  return value["content"].get<std::string>();
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) {
    const auto config = path / "tokenizer_config.json";
    return load_files(path / "tokenizer.json",
                      std::filesystem::exists(config) ? std::optional(config) : std::nullopt);
  }
  return load_files(path, std::nullopt);
}

Tokenizer Tokenizer::load_files(const std::filesystem::path& tokenizer_json,
                                const std::optional<std::filesystem::path>& tokenizer_config) {
  const auto text = read_file(tokenizer_json);
  const auto config = tokenizer_config ? read_json(*tokenizer_config) : nlohmann::json();
  try {
    auto parsed = parse_tokenizer_json(text);
    return build(parsed.document, tokenizer_config ? &config : nullptr, parsed.vocab ? &*parsed.vocab : nullptr,
                 parsed.merges ? &*parsed.merges : nullptr);
  } catch (const Error& e) {
    // Config errors name the config file, the others tokenizer.json.
    const std::string_view message = e.what();
    constexpr std::string_view kConfig = "tokenizer_config.json: ";
    if (tokenizer_config && message.starts_with(kConfig))
      fail("{}: {}", tokenizer_config->string(), message.substr(kConfig.size()));
    fail("{}: {}", tokenizer_json.string(), message);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected JSON structure: {}", tokenizer_json.string(), e.what());
  }
}

Tokenizer Tokenizer::from_json(const nlohmann::json& tokenizer, const nlohmann::json* config) {
  return build(tokenizer, config, nullptr, nullptr);
}

// `vocab` / `merges`, when not null, were streamed out of the document and replace its fields.
Tokenizer Tokenizer::build(const nlohmann::json& tokenizer, const nlohmann::json* config, VocabList* vocab,
                           MergeList* merges) {
  check(tokenizer.is_object(), "expected a JSON object with \"model\" (an HF tokenizer.json)");
  check(tokenizer.contains("model"), "model: missing (expected an HF tokenizer.json)");
  check(config == nullptr || config->is_object(), "tokenizer_config.json: expected a JSON object");
  Tokenizer tok;
  const auto& model = tokenizer["model"];
  BpeModel::check_supported(model);
  check_normalizer(json_field(tokenizer, "normalizer"), "normalizer");
  check_decoder(json_field(tokenizer, "decoder"));
  // The lists not streamed out of the document by parse_tokenizer_json are read from it.
  VocabList dom_vocab;
  MergeList dom_merges;
  if (vocab == nullptr) vocab = &BpeModel::read_vocab(json_field(model, "vocab"), dom_vocab);
  if (merges == nullptr) merges = &BpeModel::read_merges(json_field(model, "merges"), dom_merges);
  tok.model_ = BpeModel::from_json(model, *vocab, *merges);
  tok.added_ = AddedVocabulary::from_json(json_field(tokenizer, "added_tokens"));
  tok.pre_tokenizer_ = PreTokenizer::from_json(json_field(tokenizer, "pre_tokenizer"));

  // The bytes of every token, once, so decoding is a table lookup.
  size_t size = tok.model_.vocab_size();
  for (const auto& added : tok.added_.tokens()) size = std::max(size, static_cast<size_t>(added.id) + 1);
  tok.token_bytes_.assign(size, std::string());
  tok.has_token_.assign(size, false);
  for (size_t id = 0; id < tok.model_.vocab_size(); ++id) {
    const std::string* token = tok.model_.id_to_token(static_cast<int32_t>(id));
    if (token == nullptr) continue;
    if (!byte_level::decode(*token, tok.token_bytes_[id])) tok.token_bytes_[id] = *token;
    tok.has_token_[id] = true;
  }
  for (const auto& added : tok.added_.tokens()) {
    tok.token_bytes_[added.id] = added.content;
    tok.has_token_[added.id] = true;
  }

  tok.bos_token_ = config_token(config, "bos_token");
  tok.eos_token_ = config_token(config, "eos_token");
  if (!tok.bos_token_.empty()) tok.bos_id_ = tok.token_to_id(tok.bos_token_);
  if (!tok.eos_token_.empty()) tok.eos_id_ = tok.token_to_id(tok.eos_token_);
  check(tok.bos_token_.empty() || tok.bos_id_, "tokenizer_config.json: bos_token \"{}\" is not a token", tok.bos_token_);
  check(tok.eos_token_.empty() || tok.eos_id_, "tokenizer_config.json: eos_token \"{}\" is not a token", tok.eos_token_);
  if (config && config->contains("chat_template") && (*config)["chat_template"].is_string())
    tok.chat_template_ = (*config)["chat_template"].get<std::string>();
  tok.post_processor_ = PostProcessor::from_json(json_field(tokenizer, "post_processor"), config,
                                                 tok.bos_id_, tok.eos_id_);
  return tok;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  size_t bad = 0;
  check(utf8::is_valid(text, &bad), "text: invalid UTF-8 at byte {}", bad);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), post_processor_.prefix.begin(), post_processor_.prefix.end());
  thread_local std::vector<Segment> segments;
  segments.clear();
  added_.split(text, segments);
  for (const auto& segment : segments) {
    if (segment.token_id >= 0) {
      ids.push_back(segment.token_id);
    } else {
      encode_text(text, segment.begin, segment.end, ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), post_processor_.suffix.begin(), post_processor_.suffix.end());
  return ids;
}

void Tokenizer::encode_text(std::string_view text, size_t begin, size_t end, std::vector<int32_t>& out) const {
  thread_local std::vector<Span> pieces;
  thread_local std::string word;
  pieces.clear();
  pre_tokenizer_.split(text, {begin, end, false}, pieces);
  for (const auto& piece : pieces) {
    const auto raw = text.substr(piece.begin, piece.end - piece.begin);
    if (!pre_tokenizer_.byte_level()) {
      model_.encode_word(raw, out);
      continue;
    }
    word.clear();
    if (piece.prefix_space) word += byte_level::encode_byte(' ');
    byte_level::encode(raw, word);
    model_.encode_word(word, out);
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string text, chunk;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    check(is_token(id), "ids[{}]: {} is not a token id (vocabulary size {})", i, id, vocab_size());
    if (const AddedToken* added = added_.find(id)) {
      if (skip_special_tokens && added->special) continue;
      // As HF: bytes before an added token are decoded on their own, the token's text follows verbatim.
      utf8::append_lossy(chunk, text);
      chunk.clear();
      text += added->content;
    } else {
      chunk += token_bytes_[id];
    }
  }
  utf8::append_lossy(chunk, text);
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = added_.token_to_id(token)) return id;
  return model_.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = added_.find(id)) return added->content;
  if (const std::string* token = model_.id_to_token(id)) return *token;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* added = added_.find(id);
  return added != nullptr && added->special;
}

}  // namespace moeserve::server

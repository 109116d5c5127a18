#include "server/post_processor.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/json_field.h"

namespace moeserve::server {
namespace {

int32_t template_token_id(const nlohmann::json& special_tokens, const std::string& name, const std::string& where) {
  check(special_tokens.is_object() && special_tokens.contains(name), "{}: special token '{}' is not in special_tokens",
        where, name);
  const auto& ids = json_field(special_tokens[name], "ids");
  check(ids.is_array() && ids.size() == 1 && ids[0].is_number_integer(),
        "{}.special_tokens[\"{}\"].ids: expected one integer id", where, name);
  return ids[0].get<int32_t>();
}

void add_template(const nlohmann::json& json, const std::string& where, PostProcessor& out) {
  const auto& single = json_field(json, "single");
  check(single.is_array(), "{}.single: expected an array", where);
  const auto& special_tokens = json_field(json, "special_tokens");
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const auto& item = single[i];
    const auto item_where = fmt::format("{}.single[{}]", where, i);
    if (item.contains("Sequence")) {
      check(!seen_sequence, "{}: more than one sequence in a single-sequence template", item_where);
      seen_sequence = true;
    } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id") &&
               item["SpecialToken"]["id"].is_string()) {
      const int32_t id = template_token_id(special_tokens, item["SpecialToken"]["id"].get<std::string>(), where);
      (seen_sequence ? out.suffix : out.prefix).push_back(id);
    } else {
      fail("{}: expected {{\"Sequence\": ...}} or {{\"SpecialToken\": {{\"id\": ...}}}}", item_where);
    }
  }
  check(seen_sequence, "{}.single: the template has no Sequence", where);
}

// BertProcessing / RobertaProcessing: "cls": [token, id], "sep": [token, id].
void add_cls_sep(const nlohmann::json& json, const std::string& where, PostProcessor& out) {
  for (const char* field : {"cls", "sep"}) {
    const auto& pair = json_field(json, field);
    check(pair.is_array() && pair.size() == 2 && pair[1].is_number_integer(), "{}.{}: expected [token, id]", where,
          field);
  }
  out.prefix.push_back(json["cls"][1].get<int32_t>());
  out.suffix.push_back(json["sep"][1].get<int32_t>());
}

void add_processor(const nlohmann::json& json, const std::string& where, PostProcessor& out) {
  if (json.is_null()) return;
  check(json.is_object() && json.contains("type") && json["type"].is_string(),
        "{}: expected an object with a string \"type\"", where);
  const auto type = json["type"].get<std::string>();
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "TemplateProcessing") return add_template(json, where, out);
  if (type == "BertProcessing" || type == "RobertaProcessing") return add_cls_sep(json, where, out);
  if (type == "Sequence") {
    const auto& list = json_field(json, "processors");
    check(list.is_array(), "{}.processors: expected an array", where);
    for (size_t i = 0; i < list.size(); ++i) add_processor(list[i], fmt::format("{}.processors[{}]", where, i), out);
    return;
  }
  fail("{}.type: unsupported post-processor '{}' (supported: ByteLevel, TemplateProcessing, BertProcessing, "
       "RobertaProcessing, Sequence)",
       where, type);
}

}  // namespace

PostProcessor PostProcessor::from_json(const nlohmann::json& post_processor, const nlohmann::json* config,
                                       std::optional<int32_t> bos, std::optional<int32_t> eos) {
  PostProcessor result;
  add_processor(post_processor, "post_processor", result);  // validated even when the config overrides it
  if (config && (config->contains("add_bos_token") || config->contains("add_eos_token"))) {
    result = {};
    const auto flag = [&](const char* field) {
      const auto& value = json_field(*config, field);
      check(value.is_null() || value.is_boolean(), "tokenizer_config.json: {}: expected a boolean", field);
      return value.is_boolean() && value.get<bool>();
    };
    if (flag("add_bos_token")) {
      check(bos.has_value(), "tokenizer_config.json: add_bos_token is true but bos_token is missing or not a token");
      result.prefix.push_back(*bos);
    }
    if (flag("add_eos_token")) {
      check(eos.has_value(), "tokenizer_config.json: add_eos_token is true but eos_token is missing or not a token");
      result.suffix.push_back(*eos);
    }
  }
  return result;
}

}  // namespace moeserve::server

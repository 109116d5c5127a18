#include "server/tokenizer_json.h"

#include "core/error.h"

namespace moeserve::server {
namespace {

// Builds the document like nlohmann's DOM parser, except for the two streamed fields.
class Handler : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) {}

  const std::string& error() const { return error_; }

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return mode_ == Mode::Vocab ? vocab_id(v) : value(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return mode_ == Mode::Vocab ? vocab_id(v > INT64_MAX ? -1 : static_cast<int64_t>(v)) : value(v);
  }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool binary(binary_t& v) override { return value(std::move(v)); }

  bool string(string_t& v) override {
    if (mode_ == Mode::Merges) {
      if (pair_depth_ == 0) {
        out_.merges->push_back(split_merge(v, out_.merges->size()));
        return true;
      }
      pair_.push_back(std::move(v));
      return true;
    }
    return value(std::move(v));
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::Vocab) {
      pending_key_ = std::move(k);
      return true;
    }
    if (stack_.size() == 1) root_key_ = k;
    streamable_ = stack_.size() == 2 && root_key_ == "model" && (k == "vocab" || k == "merges");
    current_key_ = k;
    object_element_ = &(*stack_.back())[k];
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::None) return unexpected("an object");
    if (streamable_ && current_key_ == "vocab") {
      mode_ = Mode::Vocab;
      out_.vocab.emplace();
      streamable_ = false;
      return true;
    }
    streamable_ = false;
    stack_.push_back(add(nlohmann::json::object()));
    return true;
  }

  bool end_object() override {
    if (mode_ == Mode::Vocab) {
      mode_ = Mode::None;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::Merges) {
      if (pair_depth_ > 0) return unexpected("a nested array");
      pair_depth_ = 1;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::None) return unexpected("an array");
    if (streamable_ && current_key_ == "merges") {
      mode_ = Mode::Merges;
      out_.merges.emplace();
      streamable_ = false;
      return true;
    }
    streamable_ = false;
    stack_.push_back(add(nlohmann::json::array()));
    return true;
  }

  bool end_array() override {
    if (mode_ == Mode::Merges) {
      if (pair_depth_ == 0) {
        mode_ = Mode::None;
        return true;
      }
      pair_depth_ = 0;
      if (pair_.size() != 2) return unexpected("an array without exactly two strings");
      out_.merges->emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      return true;
    }
    stack_.pop_back();
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = fmt::format("invalid JSON: {}", e.what());
    return false;
  }

 private:
  enum class Mode { None, Vocab, Merges };

  template <typename T>
  bool value(T&& v) {
    if (mode_ != Mode::None) return unexpected("a scalar");
    streamable_ = false;
    add(nlohmann::json(std::forward<T>(v)));
    return true;
  }

  nlohmann::json* add(nlohmann::json&& v) {
    if (stack_.empty()) {
      out_.document = std::move(v);
      return &out_.document;
    }
    if (stack_.back()->is_array()) {
      stack_.back()->push_back(std::move(v));
      return &stack_.back()->back();
    }
    *object_element_ = std::move(v);
    return object_element_;
  }

  bool vocab_id(int64_t id) {
    if (id < 0 || id >= INT32_MAX) {
      error_ = fmt::format("model.vocab[\"{}\"]: expected a non-negative integer id", pending_key_);
      return false;
    }
    out_.vocab->emplace_back(std::move(pending_key_), id);
    return true;
  }

  bool unexpected(const char* what) {
    if (mode_ == Mode::Vocab) {
      error_ = fmt::format("model.vocab[\"{}\"]: expected a non-negative integer id, got {}", pending_key_, what);
    } else {
      error_ = fmt::format("model.merges[{}]: expected a \"left right\" string or a [left, right] pair, got {}",
                           out_.merges->size(), what);
    }
    return false;
  }

  TokenizerJson& out_;
  std::vector<nlohmann::json*> stack_;
  nlohmann::json* object_element_ = nullptr;
  std::string root_key_, current_key_, pending_key_, error_;
  bool streamable_ = false;
  Mode mode_ = Mode::None;
  int pair_depth_ = 0;
  std::vector<std::string> pair_;
};

}  // namespace

std::pair<std::string, std::string> split_merge(const std::string& line, size_t index) {
  const auto space = line.find(' ');
  check(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
        "model.merges[{}]: expected \"left right\" with one space, got \"{}\"", index, line);
  return {line.substr(0, space), line.substr(space + 1)};
}

std::pair<std::string, std::string> split_merge(const nlohmann::json& entry, size_t index) {
  if (entry.is_string()) return split_merge(entry.get_ref<const std::string&>(), index);
  check(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string(),
        "model.merges[{}]: expected a \"left right\" string or a [left, right] pair of strings", index);
  return {entry[0].get<std::string>(), entry[1].get<std::string>()};
}

TokenizerJson parse_tokenizer_json(std::string_view text) {
  TokenizerJson out;
  Handler handler(out);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &handler);
  if (!ok) fail("{}", handler.error().empty() ? std::string("invalid JSON") : handler.error());
  return out;
}

}  // namespace moeserve::server

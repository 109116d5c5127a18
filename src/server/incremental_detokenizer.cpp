#include "server/incremental_detokenizer.h"

#include "server/utf8.h"

namespace moeserve::server {

void IncrementalDetokenizer::push(int32_t id, std::string& out) {
  if (!tokenizer_->is_token(id)) return;
  if (tokenizer_->is_added(id)) {
    if (skip_special_tokens_ && tokenizer_->is_special(id)) return;
    // An added token ends the byte run before it, as in Tokenizer::decode.
    flush(out);
    out += tokenizer_->token_bytes(id);
    return;
  }
  pending_ += tokenizer_->token_bytes(id);
  const size_t hold = utf8::incomplete_tail(pending_);
  utf8::append_lossy(std::string_view(pending_).substr(0, pending_.size() - hold), out);
  pending_.erase(0, pending_.size() - hold);
}

void IncrementalDetokenizer::flush(std::string& out) {
  utf8::append_lossy(pending_, out);
  pending_.clear();
}

}  // namespace moeserve::server

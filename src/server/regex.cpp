#include "server/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace moeserve::server {
namespace {

// One match-data block per thread, enough for the overall match of any pattern (we use no groups).
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                             &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    fail("{}: invalid regex at offset {}: {} (pattern: {})", where, error_offset, reinterpret_cast<char*>(message),
         pattern);
  }
  // JIT is a speed-up only; the interpreter gives the same matches if JIT is unavailable.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Regex::Regex(Regex&& other) noexcept : pattern_(std::move(other.pattern_)), code_(other.code_) {
  other.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
    pattern_ = std::move(other.pattern_);
    code_ = other.code_;
    other.code_ = nullptr;
  }
  return *this;
}

bool Regex::find(std::string_view subject, size_t start, size_t* match_begin, size_t* match_end) const {
  auto* data = thread_match_data();
  const int rc = pcre2_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                             subject.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  check(rc >= 0, "regex match failed with PCRE2 error {} (pattern: {})", rc, pattern_);
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
  *match_begin = ovector[0];
  *match_end = ovector[1];
  return true;
}

size_t Regex::next_char(std::string_view subject, size_t pos) {
  ++pos;
  while (pos < subject.size() && (static_cast<unsigned char>(subject[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

}  // namespace moeserve::server

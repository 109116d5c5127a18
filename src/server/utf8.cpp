#include "server/utf8.h"

namespace moeserve::server::utf8 {
namespace {

inline bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Expected length for a lead byte and the allowed range of the second byte (Unicode Table 3-7),
// which excludes overlong forms, surrogates and code points above U+10FFFF.
struct LeadInfo {
  int length;  // 0: not a lead byte
  unsigned char second_lo, second_hi;
};

inline LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from `pos` are a valid (possibly unfinished) prefix of one sequence.
size_t valid_prefix(std::string_view text, size_t pos, int* expected) {
  const auto lead = lead_info(static_cast<unsigned char>(text[pos]));
  *expected = lead.length;
  if (lead.length == 0) return 0;
  size_t n = 1;
  for (int i = 1; i < lead.length && pos + i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[pos + i]);
    const bool ok = i == 1 ? (b >= lead.second_lo && b <= lead.second_hi) : is_continuation(b);
    if (!ok) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t sequence_length(std::string_view text, size_t pos) {
  int expected = 0;
  const size_t n = valid_prefix(text, pos, &expected);
  return (expected > 0 && n == static_cast<size_t>(expected)) ? n : 0;
}

bool is_valid(std::string_view text, size_t* error_offset) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = sequence_length(text, pos);
    if (n == 0) {
      if (error_offset) *error_offset = pos;
      return false;
    }
    pos += n;
  }
  return true;
}

void append_lossy(std::string_view bytes, std::string& out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    int expected = 0;
    const size_t n = valid_prefix(bytes, pos, &expected);
    if (expected > 0 && n == static_cast<size_t>(expected)) {
      out.append(bytes.data() + pos, n);
      pos += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal subpart (at least one byte)
      pos += n == 0 ? 1 : n;
    }
  }
}

size_t incomplete_tail(std::string_view bytes) {
  const size_t size = bytes.size();
  for (size_t back = 1; back <= 3 && back <= size; ++back) {
    const size_t pos = size - back;
    const auto b = static_cast<unsigned char>(bytes[pos]);
    if (is_continuation(b)) continue;
    int expected = 0;
    const size_t n = valid_prefix(bytes, pos, &expected);
    return (n == back && expected > static_cast<int>(back)) ? back : 0;
  }
  return 0;
}

void append_code_point(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

char32_t decode(const char* p, size_t length) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  switch (length) {
    case 1: return u[0];
    case 2: return (char32_t(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    case 3: return (char32_t(u[0] & 0x0F) << 12) | (char32_t(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    default:
      return (char32_t(u[0] & 0x07) << 18) | (char32_t(u[1] & 0x3F) << 12) | (char32_t(u[2] & 0x3F) << 6) |
             (u[3] & 0x3F);
  }
}

bool is_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace moeserve::server::utf8

#include "server/byte_level.h"

#include <array>

#include "server/utf8.h"

namespace moeserve::server::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> from_unicode;  // code point (< 0x200) -> byte, -1 if none

  Tables() {
    from_unicode.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int cp = printable ? b : next++;
      utf8::append_code_point(static_cast<char32_t>(cp), to_unicode[b]);
      from_unicode[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view encode_byte(unsigned char byte) { return tables().to_unicode[byte]; }

void encode(std::string_view raw, std::string& out) {
  const auto& t = tables();
  for (unsigned char b : raw) out += t.to_unicode[b];
}

bool decode(std::string_view token, std::string& out) {
  const auto& t = tables();
  const size_t start = out.size();
  size_t pos = 0;
  while (pos < token.size()) {
    const size_t n = utf8::sequence_length(token, pos);
    const char32_t cp = n == 0 ? 0x1FF + 1 : utf8::decode(token.data() + pos, n);
    if (cp >= t.from_unicode.size() || t.from_unicode[cp] < 0) {
      out.resize(start);
      return false;
    }
    out += static_cast<char>(t.from_unicode[cp]);
    pos += n;
  }
  return true;
}

}  // namespace moeserve::server::byte_level

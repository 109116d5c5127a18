#include "bench/sse.h"

namespace moeserve::bench {

void SseReader::take_line(std::string_view line, std::vector<std::string>& out) const {
  if (line.empty() || line.front() == ':') return;
  constexpr std::string_view kData = "data:";
  if (line.substr(0, kData.size()) != kData) return;
  line.remove_prefix(kData.size());
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  out.emplace_back(line);
}

std::vector<std::string> SseReader::feed(std::string_view bytes) {
  std::vector<std::string> out;
  if (skip_lf_ && !bytes.empty()) {
    if (bytes.front() == '\n') bytes.remove_prefix(1);
    skip_lf_ = false;
  }
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') continue;
    if (buffer_.empty()) {
      take_line(bytes.substr(start, i - start), out);
    } else {
      buffer_.append(bytes.substr(start, i - start));
      take_line(buffer_, out);
      buffer_.clear();
    }
    if (c == '\r') {
      if (i + 1 < bytes.size()) {
        if (bytes[i + 1] == '\n') ++i;
      } else {
        skip_lf_ = true;
      }
    }
    start = i + 1;
  }
  buffer_.append(bytes.substr(start));
  return out;
}

std::vector<std::string> SseReader::finish() {
  std::vector<std::string> out;
  if (!buffer_.empty()) take_line(buffer_, out);
  buffer_.clear();
  skip_lf_ = false;
  return out;
}

}  // namespace moeserve::bench

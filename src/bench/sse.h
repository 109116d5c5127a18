#pragma once
// Incremental reader of a text/event-stream body. Bytes arrive in arbitrary pieces (a network read may
// end mid-line); every complete `data:` line yields its payload. Like the clients of sglang and vLLM it
// is line based: each data line is one message (LLM servers send one JSON object per line), comment
// lines (`: ping`) and other fields (`event:`, `id:`, `retry:`) are skipped, and the line ending may be
// \n, \r\n or \r.
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::bench {

class SseReader {
 public:
  // Appends `bytes` and returns the payloads of the data lines it completed, in order.
  std::vector<std::string> feed(std::string_view bytes);
  // Called at end of stream: a last line without its line ending still counts.
  std::vector<std::string> finish();
  // Bytes received that did not form a complete line yet.
  size_t pending() const { return buffer_.size(); }

 private:
  void take_line(std::string_view line, std::vector<std::string>& out) const;
  std::string buffer_;
  bool skip_lf_ = false;  // the previous piece ended with \r: a leading \n belongs to that line ending
};

}  // namespace moeserve::bench

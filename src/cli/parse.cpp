#include "cli/parse.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace moeserve::cli {

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  check(!text.empty(), "{}: expected comma-separated token ids, got an empty string", flag);
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(begin, end - begin);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    char* stop = nullptr;
    errno = 0;
    long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &stop, 10);
    check(!item.empty() && stop && *stop == 0 && errno == 0 && v >= 0 && v <= INT32_MAX,
          "{}: '{}' is not a token id (expected non-negative integers separated by commas)", flag, item);
    ids.push_back(int32_t(v));
    begin = end + 1;
  }
  return ids;
}

}  // namespace moeserve::cli

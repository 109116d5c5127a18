#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/sse.h"

namespace moeserve::bench {
namespace {
using Lines = std::vector<std::string>;

TEST(BenchSse, SplitsDataLinesAcrossArbitraryPieces) {
  SseReader r;
  EXPECT_EQ(r.feed("data: {\"a\""), Lines{});
  EXPECT_GT(r.pending(), 0u);
  EXPECT_EQ(r.feed(":1}\n\ndata: [DO"), Lines{"{\"a\":1}"});
  EXPECT_EQ(r.feed("NE]\n\n"), Lines{"[DONE]"});
  EXPECT_EQ(r.pending(), 0u);
}

TEST(BenchSse, SeveralMessagesInOnePieceAndAllLineEndings) {
  SseReader r;
  EXPECT_EQ(r.feed("data: 1\r\n\r\ndata:2\n\ndata: 3\r\rdata: 4\n"), (Lines{"1", "2", "3", "4"}));
  // A \r at the end of one piece and its \n at the start of the next is one line ending.
  EXPECT_EQ(r.feed("data: 5\r"), Lines{"5"});
  EXPECT_EQ(r.feed("\ndata: 6\n"), Lines{"6"});
}

TEST(BenchSse, SkipsCommentsAndOtherFields) {
  SseReader r;
  EXPECT_EQ(r.feed(": ping\n\nevent: message\nid: 7\nretry: 10\ndata: x\n\n"), Lines{"x"});
}

TEST(BenchSse, FinishTakesAnUnterminatedLastLine) {
  SseReader r;
  EXPECT_EQ(r.feed("data: [DONE]"), Lines{});
  EXPECT_EQ(r.finish(), Lines{"[DONE]"});
  EXPECT_EQ(r.finish(), Lines{});
}

}  // namespace
}  // namespace moeserve::bench

// The GPU benchmarks' ceilings: the committed file parses and has the H200 entry that stands in for unknown cards,
// entries match by GPU name, a measured file named by MOESERVE_CEILINGS comes first, and a bad file names the field.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "bench/gpu_ceilings.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {

std::string entry(const std::string& match, double copy_tbs) {
  return R"({"match": ")" + match + R"(", "source": "test", "copy_tbs": )" + std::to_string(copy_tbs) +
         R"(, "bf16_tflops": 700, "fp8_tflops": 1300, "fp32_simt_tflops": 55})";
}

std::string file_of(const std::string& entries) { return R"({"about": "test", "gpus": [)" + entries + "]}"; }

// The message parse_gpu_ceilings throws for text ("" if none).
std::string problem(const std::string& text) {
  try {
    parse_gpu_ceilings(text, "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GpuCeilings, CommittedFileHasTheH200EntryTheBenchmarksFallBackTo) {
  unsetenv("MOESERVE_CEILINGS");
  const CeilingsChoice h200 = load_gpu_ceilings("NVIDIA H200");
  EXPECT_TRUE(h200.matched);
  EXPECT_EQ(h200.ceilings.match, "H200");
  EXPECT_GT(h200.ceilings.copy_bytes_per_s, 1e12);
  EXPECT_GT(h200.ceilings.fp8_flops_per_s, h200.ceilings.bf16_flops_per_s);
  const CeilingsChoice other = load_gpu_ceilings("Some Future GPU");
  EXPECT_FALSE(other.matched);
  EXPECT_EQ(other.ceilings.match, "H200");
  EXPECT_NE(describe(other).find("not percentages"), std::string::npos) << describe(other);
  EXPECT_EQ(describe(h200).find("not percentages"), std::string::npos) << describe(h200);
}

TEST(GpuCeilings, FirstEntryWhoseMatchIsInTheNameWins) {
  const auto entries = parse_gpu_ceilings(file_of(entry("H100", 3.0) + "," + entry("H200", 4.28)), "t.json");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_DOUBLE_EQ(entries[0].copy_bytes_per_s, 3.0e12);
  EXPECT_DOUBLE_EQ(entries[0].fp32_flops_per_s, 55e12);
  const CeilingsChoice h100 = choose_gpu_ceilings(entries, "NVIDIA H100 80GB HBM3");
  EXPECT_TRUE(h100.matched);
  EXPECT_EQ(h100.ceilings.match, "H100");
  EXPECT_EQ(choose_gpu_ceilings(entries, "NVIDIA H200").ceilings.match, "H200");
  EXPECT_THROW(choose_gpu_ceilings(parse_gpu_ceilings(file_of(entry("H100", 3.0)), "t.json"), "NVIDIA A100"), Error);
}

TEST(GpuCeilings, MeasuredFileNamedByTheEnvironmentComesFirst) {
  const auto path = std::filesystem::temp_directory_path() / ("gpu_ceilings_test_" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << file_of(entry("H200", 4.5));
  setenv("MOESERVE_CEILINGS", path.c_str(), 1);
  const CeilingsChoice measured = load_gpu_ceilings("NVIDIA H200");
  setenv("MOESERVE_CEILINGS", (path.string() + ".missing").c_str(), 1);
  EXPECT_THROW(load_gpu_ceilings("NVIDIA H200"), Error);
  unsetenv("MOESERVE_CEILINGS");
  std::filesystem::remove(path);
  EXPECT_TRUE(measured.matched);
  EXPECT_DOUBLE_EQ(measured.ceilings.copy_bytes_per_s, 4.5e12);
}

TEST(GpuCeilings, BadFilesNameTheFieldAndWhatWasExpected) {
  EXPECT_NE(problem("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(problem(R"({"gpus": 3})").find("'gpus' array"), std::string::npos);
  EXPECT_NE(problem(file_of("7")).find("gpus[0]: expected an object"), std::string::npos);
  std::string no_copy = entry("H100", 3.0);
  no_copy.replace(no_copy.find("\"copy_tbs\""), 10, "\"copy_gbs\"");
  EXPECT_NE(problem(file_of(no_copy)).find("gpus[0]: field 'copy_tbs' must be a positive number"), std::string::npos)
      << problem(file_of(no_copy));
  EXPECT_NE(problem(file_of(entry("H200", 4.28) + "," + entry("H100", -1))).find("gpus[1]: field 'copy_tbs'"),
            std::string::npos);
  EXPECT_NE(problem(file_of(R"({"match": "", "source": "x"})")).find("field 'match' must be a non-empty string"),
            std::string::npos);
  EXPECT_EQ(problem(file_of(entry("H100", 3.0))), "");
}

}  // namespace
}  // namespace moeserve::bench

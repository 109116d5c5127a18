#pragma once
// A fresh random seed per test, printed so that a failure can be replayed: MOESERVE_TEST_SEED=<n> repeats it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace moeserve::testing {

inline std::mt19937_64 seeded() {
  uint64_t seed;
  if (const char* env = std::getenv("MOESERVE_TEST_SEED"))
    seed = std::strtoull(env, nullptr, 10);
  else
    seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[seed] %s.%s: %llu (MOESERVE_TEST_SEED=%llu repeats it)\n", info->test_suite_name(), info->name(),
              (unsigned long long)seed, (unsigned long long)seed);
  return std::mt19937_64(seed);
}

}  // namespace moeserve::testing

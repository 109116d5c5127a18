// The environment switches' reader: set, set to another value, and unset.
#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace moeserve {
namespace {

TEST(Env, IsTrueOnlyForTheExactValue) {
  const char* name = "MOESERVE_ENV_TEST_SWITCH";
  ::unsetenv(name);
  EXPECT_FALSE(env_is(name, "0"));
  EXPECT_FALSE(env_is(name, ""));
  ::setenv(name, "0", 1);
  EXPECT_TRUE(env_is(name, "0"));
  EXPECT_FALSE(env_is(name, "1"));
  EXPECT_FALSE(env_is(name, "00"));
  ::setenv(name, "fp8", 1);
  EXPECT_TRUE(env_is(name, "fp8"));
  EXPECT_FALSE(env_is(name, "fp"));
  ::setenv(name, "", 1);
  EXPECT_TRUE(env_is(name, ""));
  EXPECT_FALSE(env_is(name, "0"));
  ::unsetenv(name);
}

}  // namespace
}  // namespace moeserve

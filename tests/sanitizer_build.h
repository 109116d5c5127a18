#pragma once
// True in the builds of scripts/sanitize.sh, which run everything several to tens of times slower: tests that
// bound a measured time from above (the benchmark client's timings) skip that bound there, and check it in
// every other build; tests whose outcome depends on one event coming before another stretch their scripted
// times by kTimeScale there.
namespace moeserve::testing {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif
inline constexpr int kTimeScale = kSanitizerBuild ? 10 : 1;
}  // namespace moeserve::testing

#pragma once
// GPU tests skip themselves, with the reason, where no usable GPU is present (CI builds and runs them on CPU
// machines).
#include <gtest/gtest.h>

#include "kernels/cuda/device.h"

#define SKIP_WITHOUT_GPU() \
  if (!::moeserve::cuda::available()) GTEST_SKIP() << "no GPU: " << ::moeserve::cuda::device_info().reason

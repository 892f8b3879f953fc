// Test main. Tests that need a GPU are named *_CUDA and begin with
// GANTRY_REQUIRE_CUDA() (support.hpp): without a CUDA device they are
// skipped, and ctest reports them as skipped (scripts/test.sh allows exactly
// those). A CPU-only LibTorch's build does not list them at all.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

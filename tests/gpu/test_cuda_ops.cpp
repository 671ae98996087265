// The GPU op table: every CUDA op against its CPU form (the harness and its rules: tests/gpu/op_test.h; the rows,
// by what they test: test_ops_*.cpp). One TEST_P over the table; every row is skipped when no GPU is visible (CI).
#include "tests/gpu/op_test.h"

namespace deepinfer::op_test {
namespace {

const std::vector<OpCase>& table() {
  static const std::vector<OpCase> cases = [] {
    OpTable t;
    add_dense_rows(t);
    add_fp8_rows(t);
    add_moe_rows(t);
    add_attention_rows(t);
    add_v41_rows(t);
    add_v41_hc_rows(t);
    return t.cases();
  }();
  return cases;
}

class CudaOp : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
    DI_CUDA_CHECK(cudaSetDevice(0));
  }
};

TEST_P(CudaOp, MatchesCpu) {
  const OpCase& c = table()[GetParam()];
  OpRun run(c.sizes, c.tolerance);
  c.run(run);
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  const OpCase& c = table()[info.param];
  std::string name = c.op + "_" + c.dtype;
  for (const auto& [size, value] : c.sizes) name += "_" + size + std::to_string(value);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Table, CudaOp, ::testing::Range<size_t>(0, table().size()), case_name);

}  // namespace
}  // namespace deepinfer::op_test

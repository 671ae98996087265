// main() of the multi-rank GoogleTest binaries (after mscclpp's tests): one global MPI environment,
// results printed by rank 0 only, and a watchdog that aborts the whole job, naming the test, when a test
// outlives its time limit (DEEPINFER_TEST_TIMEOUT_S, default 120 s) instead of letting it hang.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace {

class MpiEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { MPI_Finalize(); }
};

// Aborts the job when one test runs longer than the limit.
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  explicit Watchdog(double limit_s) : limit_s_(limit_s), thread_([this] { loop(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard lock(mutex_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit_s_));
    armed_ = true;
    cv_.notify_all();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard lock(mutex_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ && !stop_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        std::fprintf(stderr, "[rank %d] test %s exceeded its %.0f s limit; aborting the job\n", rank,
                     name_.c_str(), limit_s_);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 124);
      }
    }
  }

  double limit_s_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  bool armed_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  const char* limit = std::getenv("DEEPINFER_TEST_TIMEOUT_S");
  listeners.Append(new Watchdog(limit ? std::atof(limit) : 120.0));

  const int local_failed = RUN_ALL_TESTS();
  // RUN_ALL_TESTS ran TearDown (MPI_Finalize) already; each rank's own verdict is its exit code.
  return local_failed;
}

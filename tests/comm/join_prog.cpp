// One rank that joins the job (init_communicator from the environment), all-reduces a one and
// prints "joined: rank R of W, sum S"; with HOLD_FILE set it waits for that file and all-reduces
// again, so another job can meet its store meanwhile. Errors: "join_prog: error: ..." and exit 1.
#include <zero/comm/process_group.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

namespace {

double sum_of_ones(zero::Communicator& world) {
  at::Tensor one = at::ones({1});
  world.all_reduce(one, zero::ReduceOp::kSum)->wait();
  return one.item<double>();
}

}  // namespace

int main() {
  try {
    const zero::RankEnv env = zero::detect_rank_env();
    auto world = zero::init_communicator(env);
    std::printf("joined: rank %d of %d, sum %.0f, token %s\n", world->rank(), world->world_size(),
                sum_of_ones(*world), env.job_token.empty() ? "none" : "set");
    std::fflush(stdout);
    if (const char* hold = std::getenv("HOLD_FILE")) {
      while (access(hold, F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::printf("after hold: rank %d, sum %.0f\n", world->rank(), sum_of_ones(*world));
    }
    return 0;
  } catch (const std::exception& e) {
    std::printf("join_prog: error: %s\n", e.what());
    return 1;
  }
}

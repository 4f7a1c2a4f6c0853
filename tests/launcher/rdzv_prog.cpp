// A rank that really rendezvouses: all ranks meet in c10d::TCPStore at MASTER_ADDR:MASTER_PORT
// (rank 0 hosts it) and check that they see WORLD_SIZE distinct ranks. Prints one summary line.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "rdzv_prog: %s is not set\n", name);
    std::exit(3);
  }
  return std::atoi(v);
}
std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
}  // namespace

int main() {
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE"), port = env_int("MASTER_PORT");
  const char* addr = std::getenv("MASTER_ADDR");
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = rank == 0;
  opts.numWorkers = static_cast<std::size_t>(world);
  opts.waitWorkers = true;
  opts.timeout = std::chrono::seconds(30);
  c10d::TCPStore store(addr ? addr : "", opts);

  store.set("rank/" + std::to_string(rank), bytes(std::to_string(getpid())));
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("rank/" + std::to_string(r));
  store.wait(keys);
  std::set<std::string> pids;
  for (const std::string& k : keys) {
    std::vector<uint8_t> v = store.get(k);
    pids.insert(std::string(v.begin(), v.end()));
  }
  const int joined = static_cast<int>(store.add("joined", 1));
  // Rank 0 hosts the store: it leaves last.
  store.set("left/" + std::to_string(rank), bytes("1"));
  if (rank == 0) {
    std::vector<std::string> left;
    for (int r = 0; r < world; ++r) left.push_back("left/" + std::to_string(r));
    store.wait(left);
  }
  if (static_cast<int>(pids.size()) != world || joined > world) {
    std::printf("rdzv FAILED rank %d: %zu distinct ranks, joined %d\n", rank, pids.size(), joined);
    return 1;
  }
  std::printf("rdzv ok rank %d of %d local %s\n", rank, world, std::getenv("LOCAL_RANK"));
  return 0;
}

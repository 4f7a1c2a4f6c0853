// Building communicators: the KvStore over c10d::TCPStore (rank 0 hosts it), the Gloo TCP
// device bound to the interface that reaches MASTER_ADDR, the world group and node groups.
#include <zero/comm/process_group.h>
#include <zero/error.h>

#include "gloo_communicator.h"
#include "job_token.h"
#include "kv_store.h"
#if defined(ZERO_HAS_NCCL)
#include "nccl_communicator.h"
#endif

#include <gloo/transport/tcp/device.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <iostream>
#include <cstdlib>
#include <map>
#include <mutex>

namespace zero {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

const char* to_string(Backend backend) {
  return backend == Backend::kGloo ? "gloo" : "nccl";
}

const char* to_string(Transport transport) {
  switch (transport) {
    case Transport::kAuto:
      return "auto";
    case Transport::kShm:
      return "shm";
    case Transport::kTcp:
      return "tcp";
  }
  return "?";
}

Transport default_transport() {
  const char* v = std::getenv("ZERO_COMM_TRANSPORT");
  if (!v || !*v) return Transport::kAuto;
  const std::string s(v);
  if (s == "auto") return Transport::kAuto;
  if (s == "shm") return Transport::kShm;
  if (s == "tcp") return Transport::kTcp;
  throw ConfigError(detail::str("ZERO_COMM_TRANSPORT='", s, "': expected auto, shm or tcp"));
}

namespace detail {
namespace {

class TcpKvStore final : public KvStore {
 public:
  explicit TcpKvStore(std::shared_ptr<c10d::TCPStore> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    store_->set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override { return store_->get(key); }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    try {
      store_->wait(keys, timeout);
    } catch (const std::exception& e) {
      if (check(keys)) return;
      throw TimeoutError(str("store wait timed out after ", timeout.count(), " ms: ", e.what()));
    }
  }

 private:
  std::shared_ptr<c10d::TCPStore> store_;
};

class MemoryKvStore final : public KvStore {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      map_[key] = value;
    }
    cv_.notify_all();
  }
  std::vector<uint8_t> get(const std::string& key) override {
    wait({key}, std::chrono::minutes(10));
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.at(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<uint8_t>& v = map_[key];
    const int64_t value = (v.empty() ? 0 : std::stoll(std::string(v.begin(), v.end()))) + delta;
    const std::string text = std::to_string(value);
    v.assign(text.begin(), text.end());
    cv_.notify_all();
    return value;
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& k : keys)
      if (!map_.count(k)) return false;
    return true;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    bool ok = cv_.wait_for(lock, timeout, [&] {
      for (const auto& k : keys)
        if (!map_.count(k)) return false;
      return true;
    });
    if (!ok) throw TimeoutError(str("store wait timed out after ", timeout.count(), " ms"));
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> map_;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// The local address the kernel would use to reach `host` (no packet is sent), else "".
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return "";
  std::string result;
  int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)))
      result = buf;
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(res);
  return result;
}

std::shared_ptr<gloo::transport::Device> make_gloo_device(const RankEnv& env) {
  gloo::transport::tcp::attr attr;
  const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
  if (iface && *iface) {
    attr.iface = iface;
  } else if (env.world_size == 1 || is_loopback(env.master_addr)) {
    attr.hostname = "127.0.0.1";
  } else {
    attr.hostname = local_address_towards(env.master_addr, env.master_port);
    ZERO_CHECK(!attr.hostname.empty(), CommError,
               "cannot find a local address that reaches MASTER_ADDR=", env.master_addr,
               "; set GLOO_SOCKET_IFNAME to the network interface to use");
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CommError(str("cannot create the Gloo TCP device (",
                        attr.iface.empty() ? attr.hostname : attr.iface, "): ", e.what()));
  }
}

std::shared_ptr<KvStore> connect_store(const RankEnv& env, std::chrono::milliseconds timeout) {
  if (env.world_size == 1) return make_memory_store();
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.isServer = env.rank == 0;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  try {
    return std::make_shared<TcpKvStore>(std::make_shared<c10d::TCPStore>(env.master_addr, opts));
  } catch (const std::exception& e) {
    const std::string msg =
        str("rank ", env.rank, " of ", env.world_size, ": cannot ",
            env.rank == 0 ? "host" : "reach", " the rendezvous store at ", env.master_addr, ":",
            env.master_port, " within ", timeout.count(), " ms (", to_string(env.source),
            " launch; rank 0 hosts the store): ", e.what());
    if (env.rank == 0) throw CommError(msg);
    throw TimeoutError(msg);
  }
}

}  // namespace

std::shared_ptr<KvStore> make_memory_store() {
  return std::make_shared<MemoryKvStore>();
}

}  // namespace detail

namespace {

// The world communicator of `options.backend` over the job's store.
std::shared_ptr<Communicator> make_world(const RankEnv& env, const CommOptions& options,
                                         std::shared_ptr<detail::KvStore> store) {
  if (options.backend == Backend::kNccl) {
#if defined(ZERO_HAS_NCCL)
    const int device = options.device_index >= 0 ? options.device_index : env.local_rank;
    return detail::make_nccl_communicator(store, "zero/nccl", env.rank, env.world_size,
                                          options.timeout, device);
#else
    throw UsageError(
        "init_communicator: this build has no NCCL backend (configure with CUDA and NCCL)");
#endif
  }
  detail::GlooGroupSpec spec;
  spec.store = std::move(store);
  spec.device = detail::make_gloo_device(env);
  spec.name = "zero/world";
  spec.rank = env.rank;
  spec.size = env.world_size;
  spec.timeout = options.timeout;
  spec.transport = options.transport;
  return std::make_shared<detail::GlooCommunicator>(std::move(spec));
}

}  // namespace

std::shared_ptr<Communicator> init_communicator(const RankEnv& env, const CommOptions& options) {
  ZERO_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, UsageError,
             "init_communicator: rank ", env.rank, " outside world size ", env.world_size);
  ZERO_CHECK(options.timeout.count() > 0, UsageError,
             "init_communicator: timeout must be positive");
  const std::shared_ptr<detail::KvStore> raw = detail::connect_store(env, options.timeout);
  std::shared_ptr<detail::KvStore> store =
      env.world_size == 1 ? raw : detail::join_job(raw, env, options.timeout);
  try {
    auto world = make_world(env, options, std::move(store));
    if (env.rank == 0 && env.world_size > 1) {
      const std::string refused = detail::refused_peers(*raw);
      if (!refused.empty())
        std::cerr << "[rank 0] warning: the rendezvous at " << env.master_addr << ":"
                  << env.master_port << " " << refused << "\n";
    }
    return world;
  } catch (const TimeoutError& e) {
    const std::string refused = env.rank == 0 ? detail::refused_peers(*raw) : "";
    if (refused.empty()) throw;
    throw TimeoutError(detail::str(e.what(), "; meanwhile the rendezvous ", refused));
  }
}

namespace {
void check_node_layout(const Communicator& world, const RankEnv& env, const char* what) {
  ZERO_CHECK(env.local_world_size >= 1 && world.world_size() % env.local_world_size == 0,
             UsageError, what, ": world size ", world.world_size(),
             " is not a multiple of the local world size ", env.local_world_size);
  ZERO_CHECK(world.rank() == env.rank && world.world_size() == env.world_size, UsageError, what,
             ": the communicator is not the world of this RankEnv");
}
}  // namespace

std::shared_ptr<Communicator> node_group(Communicator& world, const RankEnv& env) {
  check_node_layout(world, env, "node_group");
  const int per_node = env.local_world_size, nodes = env.world_size / per_node;
  std::shared_ptr<Communicator> mine;
  for (int node = 0; node < nodes; ++node) {  // every rank takes part in every new_group call
    std::vector<int> ranks;
    for (int i = 0; i < per_node; ++i) ranks.push_back(node * per_node + i);
    auto group = world.new_group(ranks);
    if (group) mine = group;
  }
  return mine;
}

std::shared_ptr<Communicator> cross_node_group(Communicator& world, const RankEnv& env) {
  check_node_layout(world, env, "cross_node_group");
  const int per_node = env.local_world_size, nodes = env.world_size / per_node;
  std::shared_ptr<Communicator> mine;
  for (int local = 0; local < per_node; ++local) {
    std::vector<int> ranks;
    for (int node = 0; node < nodes; ++node) ranks.push_back(node * per_node + local);
    auto group = world.new_group(ranks);
    if (group) mine = group;
  }
  return mine;
}

}  // namespace zero

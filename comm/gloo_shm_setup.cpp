// How a Gloo group agrees on shared memory: every rank's host key gathered over the TCP mesh;
// on one host, rank 0 makes the segment and broadcasts its name and nonce, the others attach, and
// only when every rank did is the name removed and the transport taken. Anything else leaves the
// group on TCP (with a warning from rank 0), or fails it when shared memory was demanded. Later,
// memory the ranks share (host_shared_tensor) is agreed on the same way through the group.
#include "gloo_communicator.h"

#include <zero/comm/host_topology.h>
#include <zero/error.h>

#include <gloo/allgather.h>
#include <gloo/broadcast.h>

#include <sys/mman.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

namespace zero::detail {
namespace {

// The setup's own messages run before any collective (whose tags start at 1).
constexpr uint32_t kSetupTag = 0;

struct SegmentRecord {
  int64_t ok = 0;
  uint64_t nonce = 0;
  char name[112] = {};
  char reason[384] = {};
};

template <typename T>
std::vector<T> gather(const std::shared_ptr<gloo::Context>& context, T mine,
                      std::chrono::milliseconds timeout) {
  std::vector<T> all(context->size);
  gloo::AllgatherOptions opts(context);
  opts.setInput(&mine, 1);
  opts.setOutput(all.data(), all.size());
  opts.setTag(kSetupTag);
  opts.setTimeout(timeout);
  gloo::allgather(opts);
  return all;
}

void copy_text(char* to, size_t size, const std::string& text) {
  std::strncpy(to, text.c_str(), size - 1);
  to[size - 1] = '\0';
}

int64_t slot_bytes_from_env(int64_t fallback) {
  const char* v = std::getenv("ZERO_SHM_SLOT_BYTES");
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long bytes = std::strtoll(v, &end, 10);
  ZERO_CHECK(end && *end == '\0' && bytes >= 4096 && bytes % 64 == 0, ConfigError,
             "ZERO_SHM_SLOT_BYTES='", v, "': a multiple of 64, at least 4096");
  return bytes;
}

}  // namespace

void GlooCommunicator::setup_shared_memory() {
  if (spec_.size == 1 || spec_.transport == Transport::kTcp) return;
  const std::string group = str("group '", spec_.name, "' (", spec_.size, " ranks)");
  const std::vector<int64_t> hosts = gather<int64_t>(context_, host_key(), spec_.timeout);
  for (int64_t h : hosts)
    if (h != hosts[0]) {
      ZERO_CHECK(spec_.transport != Transport::kShm, UsageError, "ZERO_COMM_TRANSPORT=shm: ", group,
                 " spans hosts; shared memory serves ranks of one host");
      return;
    }

  SegmentRecord record;
  std::unique_ptr<ShmGroup> shm;
  if (spec_.rank == 0) {
    try {
      shm = ShmGroup::create(spec_.size, slot_bytes_from_env(spec_.shm_slot_bytes));
      record.ok = 1;
      record.nonce = shm->nonce();
      copy_text(record.name, sizeof(record.name), shm->name());
    } catch (const CommError& e) {
      copy_text(record.reason, sizeof(record.reason), e.what());
    }
  }
  gloo::BroadcastOptions bcast(context_);
  bcast.setOutput(reinterpret_cast<uint8_t*>(&record), sizeof(record));
  bcast.setRoot(0);
  bcast.setTag(kSetupTag);
  bcast.setTimeout(spec_.timeout);
  gloo::broadcast(bcast);

  std::string reason = record.ok ? "" : str("rank 0: ", record.reason);
  if (record.ok && spec_.rank != 0) {
    try {
      shm = ShmGroup::attach(record.name, record.nonce, spec_.rank, spec_.size);
    } catch (const CommError& e) {
      reason = str("rank ", spec_.rank, ": ", e.what());
    }
  }
  const std::vector<int32_t> attached = gather<int32_t>(context_, shm ? 1 : 0, spec_.timeout);
  int refused = -1;
  for (int r = 0; r < spec_.size; ++r)
    if (!attached[r] && refused < 0) refused = r;
  if (refused < 0) {
    shm->all_attached();
    shm_ = std::move(shm);
    return;
  }
  shm.reset();  // rank 0's removes the name
  if (reason.empty()) reason = str("rank ", refused, " could not attach the segment");
  ZERO_CHECK(spec_.transport != Transport::kShm, CommError, "ZERO_COMM_TRANSPORT=shm: ", group,
             " cannot use shared memory: ", reason);
  if (spec_.rank == 0)
    std::cerr << "[zero] warning: " << group << " uses TCP: shared memory unavailable (" << reason
              << ")\n";
}

at::Tensor GlooCommunicator::host_shared_tensor(int64_t numel, at::ScalarType dtype) {
  if (!shm_) return {};
  const size_t bytes = std::max<size_t>(1, numel * dtype_bytes(dtype));
  const std::string what =
      str("group '", spec_.name, "' (", spec_.size, " ranks): sharing ", bytes, " bytes");
  SegmentRecord record;
  void* base = nullptr;
  if (spec_.rank == 0) {
    try {
      std::string name;
      base = create_shared_segment(bytes, name);
      record.ok = 1;
      copy_text(record.name, sizeof(record.name), name);
    } catch (const CommError& e) {
      copy_text(record.reason, sizeof(record.reason), e.what());
    }
  }
  at::Tensor wire = at::from_blob(&record, {static_cast<int64_t>(sizeof(record))}, at::kChar);
  broadcast(wire, 0)->wait();
  ZERO_CHECK(record.ok, CommError, what, ": rank 0: ", record.reason);
  std::string reason;
  if (spec_.rank != 0) {
    try {
      base = attach_shared_segment(record.name, bytes);
    } catch (const CommError& e) {
      reason = e.what();
    }
  }
  at::Tensor attached = at::full({1}, base ? 1 : 0, at::kInt);
  all_reduce(attached, ReduceOp::kSum)->wait();
  // Every rank mapped it (or gave up): the name goes, the memory stays until the last unmaps.
  if (spec_.rank == 0) ::shm_unlink(record.name);
  if (attached.item<int>() != spec_.size) {
    if (base) ::munmap(base, bytes);
    throw CommError(str(what, ": ",
                        reason.empty() ? "another rank could not map the segment"
                                       : str("rank ", spec_.rank, ": ", reason)));
  }
  return at::from_blob(
      base, {numel}, [bytes](void* p) { ::munmap(p, bytes); }, at::TensorOptions().dtype(dtype));
}

}  // namespace zero::detail

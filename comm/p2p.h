// What both backends share of point-to-point batches: checking the peers and naming the ops.
#pragma once

#include <zero/comm/communicator.h>

#include <zero/error.h>

#include <chrono>
#include <string>
#include <vector>

namespace zero::detail {

// UsageError naming the op when a peer is outside [0, size) or is `rank` itself.
void check_p2p_peers(const std::vector<P2POp>& ops, int rank, int size);
// "send to rank 1 (4096 bytes), recv from rank 2 (4096 bytes)": for errors and logs.
std::string describe_p2p(const std::vector<P2POp>& ops);
int64_t p2p_bytes(const std::vector<P2POp>& ops);

// One transfer of a point-to-point batch, with the number of its message between this rank and
// `peer` in its direction (the slot's tag).
struct P2PTransfer {
  P2POp::Kind kind = P2POp::Kind::kSend;
  void* data = nullptr;
  size_t bytes = 0;
  int peer = 0;
  uint32_t message = 0;
};

// The error of a transfer that did not complete by its deadline, in both transports' words:
// "<where>: recv from rank 1 (message 0 of that pair, 64 bytes) timed out after T ms: rank 1 did
// not send it".
std::string p2p_transfer_name(const std::string& where, const P2PTransfer& o);
TimeoutError p2p_timeout(const std::string& where, const P2PTransfer& o,
                         std::chrono::milliseconds timeout, const std::string& detail = "");

}  // namespace zero::detail

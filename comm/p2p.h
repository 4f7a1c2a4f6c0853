// What both backends share of point-to-point batches: checking the peers and naming the ops.
#pragma once

#include <zero/comm/communicator.h>

#include <string>
#include <vector>

namespace zero::detail {

// UsageError naming the op when a peer is outside [0, size) or is `rank` itself.
void check_p2p_peers(const std::vector<P2POp>& ops, int rank, int size);
// "send to rank 1 (4096 bytes), recv from rank 2 (4096 bytes)": for errors and logs.
std::string describe_p2p(const std::vector<P2POp>& ops);
int64_t p2p_bytes(const std::vector<P2POp>& ops);

}  // namespace zero::detail

// Small collectives the checkpoint code agrees through: int64 values gathered or broadcast over
// the engine's communicator, and `agree`, which runs a step on every rank and makes a failure on
// any rank an error on all of them (so no rank waits forever for one that gave up).
#pragma once

#include "engine_impl.h"

#include <functional>
#include <string>
#include <vector>

namespace zero::detail {

// values.size() from every rank, concatenated in rank order.
std::vector<int64_t> all_gather_values(Communicator& comm, const std::vector<int64_t>& values,
                                       at::Device device);
int64_t broadcast_value(Communicator& comm, int64_t value, at::Device device, int root = 0);
// Every rank's `text`, in rank order, on every rank.
std::vector<std::string> all_gather_text(Communicator& comm, const std::string& text,
                                         at::Device device);
// `text` of rank `root` on every rank (packed 8 bytes to an int64: collectives take no bytes).
std::string broadcast_text(Communicator& comm, const std::string& text, int root,
                           at::Device device);
// Runs `step`; when it throws zero::Error on any rank, every rank throws CheckpointError naming
// `what`, the first failing rank and (on that rank) the error.
void agree(const Engine::Impl& s, const std::string& what, at::Device device,
           const std::function<void()>& step);

}  // namespace zero::detail

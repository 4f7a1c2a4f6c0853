// The NCCL backend's factory (compiled only when ZERO_HAS_NCCL): one ncclComm per group, its
// unique id exchanged through the KvStore, one dedicated CUDA stream per communicator.
#pragma once

#include <zero/comm/communicator.h>

#include "kv_store.h"

#include <chrono>
#include <memory>
#include <string>

namespace zero::detail {

// Collective over the `size` ranks that share `name`; blocks until the communicator exists or
// `timeout` passed (TimeoutError; the half-built communicator is aborted).
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<KvStore> store,
                                                     const std::string& name, int rank, int size,
                                                     std::chrono::milliseconds timeout, int device);

}  // namespace zero::detail

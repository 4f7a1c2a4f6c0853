// The job secret at the rendezvous: a rank proves it belongs to the job by the ZERO_JOB_TOKEN it
// was given; keys of a job with a token live under a name derived from it. Internal to comm/.
#pragma once

#include "kv_store.h"

#include <zero/comm/process_group.h>

#include <chrono>
#include <memory>
#include <string>

namespace zero::detail {

// SHA-256 of `message`, as 64 lowercase hex digits.
std::string sha256_hex(const std::string& message);

// The public tag of a token (safe to show: the token cannot be recovered from it), "none"
// for a job without one.
std::string job_tag(const std::string& token);

// Checks that this rank and the store's host (rank 0) belong to the same job: rank 0 publishes
// its job tag, every other rank compares it with its own and, when they differ, leaves a note
// for rank 0 and throws CommError naming both tags and the likely cause. Returns the store
// every later key goes through: the same store without a token, else one whose keys live
// under a name derived from the token (a process without it can neither read nor write them).
std::shared_ptr<KvStore> join_job(std::shared_ptr<KvStore> store, const RankEnv& env,
                                  std::chrono::milliseconds timeout);

// Rank 0: the processes join_job refused at this store so far, as one line; "" when none.
std::string refused_peers(KvStore& store);

}  // namespace zero::detail

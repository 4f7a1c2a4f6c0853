// The small key-value store interface the Gloo backend rendezvouses and reports progress
// through; process_group.cpp implements it over c10d::TCPStore (or in memory for one process).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zero::detail {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until the key exists (bounded by the store's own timeout).
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Atomically adds `delta` to the counter under `key` (0 when absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Non-blocking: true when every key exists.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists; throws TimeoutError (without context) after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// A store living in this process only: the rendezvous of a world of one.
std::shared_ptr<KvStore> make_memory_store();

}  // namespace zero::detail

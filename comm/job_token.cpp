// The job secret at the rendezvous: the SHA-256 that derives a token's public tag and secret
// key space, the tag check each rank makes against rank 0's, and rank 0's list of refused peers.
#include "job_token.h"

#include <zero/error.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace zero::detail {
namespace {

constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
inline uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

// Keys under `prefix`: what a job with a token stores, out of reach of those without it.
class PrefixedKvStore final : public KvStore {
 public:
  PrefixedKvStore(std::shared_ptr<KvStore> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(prefix_ + key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override { return inner_->get(prefix_ + key); }
  int64_t add(const std::string& key, int64_t delta) override {
    return inner_->add(prefix_ + key, delta);
  }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(full(keys)); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    inner_->wait(full(keys), timeout);
  }

 private:
  std::vector<std::string> full(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) out.push_back(prefix_ + k);
    return out;
  }
  std::shared_ptr<KvStore> inner_;
  std::string prefix_;
};

constexpr const char* kTagKey = "zero/job_tag";
constexpr const char* kRefusedKey = "zero/refused";

std::string as_string(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}
std::vector<uint8_t> as_bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::string this_process() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return str("pid ", getpid(), " on ", host);
}

}  // namespace

std::string sha256_hex(const std::string& message) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m = message;
  const uint64_t bits = static_cast<uint64_t>(message.size()) * 8;
  m += static_cast<char>(0x80);
  while (m.size() % 64 != 56) m += '\0';
  for (int i = 7; i >= 0; --i) m += static_cast<char>((bits >> (8 * i)) & 0xff);
  for (size_t block = 0; block < m.size(); block += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      const auto* p = reinterpret_cast<const unsigned char*>(m.data() + block + 4 * i);
      w[i] = (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 =
          hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return std::string(out, 64);
}

std::string job_tag(const std::string& token) {
  return token.empty() ? "none" : sha256_hex("zero job tag\n" + token).substr(0, 16);
}

std::shared_ptr<KvStore> join_job(std::shared_ptr<KvStore> store, const RankEnv& env,
                                  std::chrono::milliseconds timeout) {
  const std::string mine = job_tag(env.job_token);
  if (env.rank == 0) {
    store->set(kTagKey, as_bytes(mine));
  } else {
    try {
      store->wait({kTagKey}, timeout);
    } catch (const TimeoutError& e) {
      throw TimeoutError(str("rank ", env.rank, " of ", env.world_size, ": the store at ",
                             env.master_addr, ":", env.master_port,
                             " did not say which job it serves within ", timeout.count(),
                             " ms (is rank 0 a zero program of this version?): ", e.what()));
    }
    const std::string theirs = as_string(store->get(kTagKey));
    if (theirs != mine) {
      const int64_t n = store->add(kRefusedKey, 1);
      store->set(str(kRefusedKey, "/", n),
                 as_bytes(str("rank ", env.rank, " (", this_process(), ", job tag ", mine, ")")));
      const std::string where = str(env.master_addr, ":", env.master_port);
      std::string why;
      if (mine == "none")
        why = str("that job has a job token (tag ", theirs,
                  ") and this process has none: start it with zerorun, or export the job's "
                  "ZERO_JOB_TOKEN to it");
      else if (theirs == "none")
        why = str("that job runs without a job token and this process has one (tag ", mine, ")");
      else
        why = str("its job token (tag ", theirs,
                  ") differs from this process's ZERO_JOB_TOKEN (tag ", mine, ")");
      throw CommError(str("rank ", env.rank, " of ", env.world_size, ": the rendezvous at ", where,
                          " belongs to another job: ", why,
                          ". Another job probably uses MASTER_PORT ", env.master_port,
                          "; give each job its own port (refused, nothing was joined)"));
    }
  }
  if (env.job_token.empty()) return store;
  const std::string space = sha256_hex("zero job keys\n" + env.job_token).substr(0, 32);
  return std::make_shared<PrefixedKvStore>(std::move(store), "zero/job/" + space + "/");
}

std::string refused_peers(KvStore& store) {
  if (!store.check({kRefusedKey})) return "";
  const int64_t n = store.add(kRefusedKey, 0);
  std::string out;
  for (int64_t i = 1; i <= n; ++i) {
    const std::string key = str(kRefusedKey, "/", i);
    out += (i > 1 ? "; " : "") + (store.check({key}) ? as_string(store.get(key)) : "?");
  }
  return str("refused ", n, " process(es) of another job (or without this job's token): ", out);
}

}  // namespace zero::detail

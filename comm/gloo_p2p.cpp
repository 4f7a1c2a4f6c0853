// Point-to-point batches over Gloo unbound buffers: every receive posted before any send (a
// send may wait for its peer's receive), then each waited for against one deadline. Each
// (peer, direction) pair numbers its messages, and the number is the slot's tag, so the n-th
// send to a peer can only land in that peer's n-th receive from this rank.
#include "gloo_communicator.h"

#include <zero/error.h>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>

namespace zero::detail {
namespace {

// Outside Gloo's own slot prefixes (0x01-0x08) and the ring reduce-scatter's (0x31).
constexpr uint8_t kP2PSlotPrefix = 0x32;

}  // namespace

void gloo_p2p(const std::shared_ptr<gloo::Context>& context, const std::vector<P2PTransfer>& ops,
              std::chrono::milliseconds timeout, const std::string& where) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto remaining = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  };
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers(ops.size());
  auto post = [&](P2POp::Kind kind) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2PTransfer& o = ops[i];
      if (o.kind != kind || o.bytes == 0) continue;  // empty: both sides skip the transfer
      buffers[i] = context->createUnboundBuffer(o.data, o.bytes);
      const gloo::Slot slot = gloo::Slot::build(kP2PSlotPrefix, o.message);
      if (kind == P2POp::Kind::kRecv)
        buffers[i]->recv(o.peer, slot, 0, o.bytes);
      else
        buffers[i]->send(o.peer, slot, 0, o.bytes);
    }
  };
  post(P2POp::Kind::kRecv);
  post(P2POp::Kind::kSend);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!buffers[i]) continue;
    const P2PTransfer& o = ops[i];
    const bool receive = o.kind == P2POp::Kind::kRecv;
    const std::string what = p2p_transfer_name(where, o);
    bool done = false;
    try {
      done = receive ? buffers[i]->waitRecv(remaining()) : buffers[i]->waitSend(remaining());
    } catch (const ::gloo::IoException& e) {
      const std::string message = e.what();
      if (message.find("imed out") != std::string::npos)
        throw p2p_timeout(where, o, timeout, "; gloo: " + message);
      throw CommError(str(what, " failed: gloo: ", message));
    }
    ZERO_CHECK(done, CommError, what, " was aborted");
  }
}

}  // namespace zero::detail

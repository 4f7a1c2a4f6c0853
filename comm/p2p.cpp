// Point-to-point batches: the interface's send/recv (batches of one) and the checks both
// backends make before issuing one.
#include "p2p.h"

#include <zero/error.h>

namespace zero {

const char* to_string(P2POp::Kind kind) {
  return kind == P2POp::Kind::kSend ? "send" : "recv";
}

WorkHandle Communicator::send(const at::Tensor& tensor, int dst) {
  return batch_p2p({P2POp{P2POp::Kind::kSend, tensor, dst}});
}

WorkHandle Communicator::recv(at::Tensor& tensor, int src) {
  return batch_p2p({P2POp{P2POp::Kind::kRecv, tensor, src}});
}

namespace detail {

void check_p2p_peers(const std::vector<P2POp>& ops, int rank, int size) {
  ZERO_CHECK(!ops.empty(), UsageError, "batch_p2p: no ops");
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& o = ops[i];
    const char* kind = to_string(o.kind);
    ZERO_CHECK(o.peer >= 0 && o.peer < size, UsageError, "batch_p2p: op ", i, " (", kind,
               o.kind == P2POp::Kind::kSend ? " to" : " from", " rank ", o.peer, ") names a rank ",
               "outside the group of ", size, " ranks");
    ZERO_CHECK(o.peer != rank, UsageError, "batch_p2p: op ", i, " (", kind, ") names rank ", rank,
               " itself; a rank cannot ", kind, o.kind == P2POp::Kind::kSend ? " to" : " from",
               " itself");
  }
}

std::string describe_p2p(const std::vector<P2POp>& ops) {
  std::string out;
  for (const P2POp& o : ops)
    out += str(out.empty() ? "" : ", ", to_string(o.kind),
               o.kind == P2POp::Kind::kSend ? " to rank " : " from rank ", o.peer, " (",
               o.tensor.defined() ? o.tensor.nbytes() : 0, " bytes)");
  return out;
}

int64_t p2p_bytes(const std::vector<P2POp>& ops) {
  int64_t bytes = 0;
  for (const P2POp& o : ops) bytes += o.tensor.defined() ? o.tensor.nbytes() : 0;
  return bytes;
}

std::string p2p_transfer_name(const std::string& where, const P2PTransfer& o) {
  const bool receive = o.kind == P2POp::Kind::kRecv;
  return str(where, ": ", to_string(o.kind), receive ? " from rank " : " to rank ", o.peer,
             " (message ", o.message, " of that pair, ", o.bytes, " bytes)");
}

TimeoutError p2p_timeout(const std::string& where, const P2PTransfer& o,
                         std::chrono::milliseconds timeout, const std::string& detail) {
  return TimeoutError(
      str(p2p_transfer_name(where, o), " timed out after ", timeout.count(), " ms: rank ", o.peer,
          o.kind == P2POp::Kind::kRecv ? " did not send it" : " did not receive it", detail));
}

}  // namespace detail
}  // namespace zero

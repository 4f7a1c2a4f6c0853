// The pipeline schedules of schedule.h, built per rank from the schedule's rules.
#include <zero/engine/pipe/schedule.h>

#include <zero/error.h>

#include <algorithm>
#include <optional>

namespace zero::pipe {

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  throw ConfigError("pipeline schedule '" + name + "' is not one of: 1f1b");
}

const char* to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kOneFOneB:
      return "1f1b";
  }
  return "?";
}

namespace {

// Appends instructions for one rank; the neighbour messages exist only where there is one.
class Builder {
 public:
  Builder(int stages, int rank) : stages_(stages), rank_(rank) {}

  std::optional<Transfer> recv_activation(int micro) const {
    if (rank_ == 0) return std::nullopt;
    return Transfer{Transfer::Kind::kRecv, Transfer::What::kActivation, micro, 0, rank_ - 1};
  }
  std::optional<Transfer> send_activation(int micro) const {
    if (rank_ == stages_ - 1) return std::nullopt;
    return Transfer{Transfer::Kind::kSend, Transfer::What::kActivation, micro, 0, rank_ + 1};
  }
  std::optional<Transfer> recv_gradient(int micro) const {
    if (rank_ == stages_ - 1) return std::nullopt;
    return Transfer{Transfer::Kind::kRecv, Transfer::What::kGradient, micro, 0, rank_ + 1};
  }
  std::optional<Transfer> send_gradient(int micro) const {
    if (rank_ == 0) return std::nullopt;
    return Transfer{Transfer::Kind::kSend, Transfer::What::kGradient, micro, 0, rank_ - 1};
  }

  // One batch of whichever of `transfers` exist (none: no instruction).
  void comm(std::initializer_list<std::optional<Transfer>> transfers) {
    Instruction in = make(Instruction::Op::kComm);
    for (const auto& t : transfers)
      if (t) in.transfers.push_back(*t);
    if (!in.transfers.empty()) out_.push_back(std::move(in));
  }
  void forward(int micro) {
    if (rank_ == 0 || rank_ == stages_ - 1) out_.push_back(make(Instruction::Op::kLoad, micro));
    out_.push_back(make(Instruction::Op::kForward, micro));
  }
  void backward(int micro) { out_.push_back(make(Instruction::Op::kBackward, micro)); }
  std::vector<Instruction> finish() {
    for (auto op : {Instruction::Op::kReduceTied, Instruction::Op::kReduce, Instruction::Op::kStep})
      out_.push_back(make(op));
    return std::move(out_);
  }

 private:
  static Instruction make(Instruction::Op op, int micro = -1) {
    Instruction in;
    in.op = op;
    in.micro = micro;
    return in;
  }
  int stages_, rank_;
  std::vector<Instruction> out_;
};

// Megatron's forward_backward_pipelining_without_interleaving, with its combined batches
// (send_forward_recv_backward, send_backward_recv_forward): each rank's blocking batches pair
// with its neighbours' in the same order, so the pipeline cannot deadlock.
std::vector<Instruction> one_f_one_b(int stages, int micro_batches, int rank) {
  Builder b(stages, rank);
  const int warmup = std::min(stages - rank - 1, micro_batches);
  const int steady = micro_batches - warmup;
  for (int i = 0; i < warmup; ++i) {
    b.comm({b.recv_activation(i)});
    b.forward(i);
    b.comm({b.send_activation(i)});
  }
  if (steady > 0) b.comm({b.recv_activation(warmup)});
  for (int i = 0; i < steady; ++i) {
    const int f = warmup + i;  // forwards run ahead of backwards by the warmup
    b.forward(f);
    b.comm({b.send_activation(f), b.recv_gradient(i)});
    b.backward(i);
    if (i == steady - 1)
      b.comm({b.send_gradient(i)});
    else
      b.comm({b.send_gradient(i), b.recv_activation(f + 1)});
  }
  for (int i = steady; i < micro_batches; ++i) {
    b.comm({b.recv_gradient(i)});
    b.backward(i);
    b.comm({b.send_gradient(i)});
  }
  return b.finish();
}

}  // namespace

std::vector<Instruction> build_schedule(ScheduleKind kind, int stages, int micro_batches,
                                        int rank) {
  ZERO_CHECK(stages >= 1 && micro_batches >= 1, UsageError, "pipeline schedule: ", stages,
             " stages and ", micro_batches, " micro-batches; both must be at least 1");
  ZERO_CHECK(rank >= 0 && rank < stages, UsageError, "pipeline schedule: rank ", rank,
             " is outside the ", stages, " stages");
  switch (kind) {
    case ScheduleKind::kOneFOneB:
      return one_f_one_b(stages, micro_batches, rank);
  }
  throw UsageError("pipeline schedule: unknown kind");
}

std::string to_string(const Instruction& in) {
  const std::string micro = std::to_string(in.micro);
  switch (in.op) {
    case Instruction::Op::kLoad:
      return "load" + micro;
    case Instruction::Op::kForward:
      return "F" + micro;
    case Instruction::Op::kBackward:
      return "B" + micro;
    case Instruction::Op::kReduceTied:
      return "reduce_tied";
    case Instruction::Op::kReduce:
      return "reduce";
    case Instruction::Op::kStep:
      return "step";
    case Instruction::Op::kComm:
      break;
  }
  std::string out = "comm[";
  for (size_t i = 0; i < in.transfers.size(); ++i) {
    const Transfer& t = in.transfers[i];
    out += (i ? ", " : "");
    out += t.kind == Transfer::Kind::kSend ? "send " : "recv ";
    out += t.what == Transfer::What::kActivation ? "act " : "grad ";
    out += std::to_string(t.micro);
    if (t.chunk) out += "." + std::to_string(t.chunk);
    out += (t.kind == Transfer::Kind::kSend ? " -> " : " <- ") + std::to_string(t.peer);
  }
  return out + "]";
}

}  // namespace zero::pipe

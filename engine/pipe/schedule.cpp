// The pipeline schedules of schedule.h, built per rank from the schedule's rules.
#include <zero/engine/pipe/schedule.h>

#include <zero/error.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace zero::pipe {

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (ScheduleKind k :
       {ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved, ScheduleKind::kZeroBubbleH1})
    if (name == to_string(k)) return k;
  throw ConfigError("pipeline schedule '" + name + "' is not one of: 1f1b, interleaved, zb-h1");
}

const char* to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZeroBubbleH1:
      return "zb-h1";
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

// One compute step of a rank's order: a forward, a backward or a zb-h1 half, of (micro, chunk).
struct Step {
  Instruction::Op op;
  int micro;
  int chunk;
};

// Where a rank's steps get their inputs and send their outputs, with v chunks per rank: rank
// r's chunk c is part c p + r of the model, so part k's output goes to rank (k + 1) % p's chunk
// (k + 1) / p. A message carries the chunk of the step that receives it. Hand-offs within a rank
// (p 1) are not messages.
class Neighbours {
 public:
  Neighbours(int stages, int chunks, int rank) : p_(stages), v_(chunks), r_(rank) {}

  std::vector<Transfer> inputs(const Step& s) const {
    std::vector<Transfer> out;
    if (s.op == Instruction::Op::kForward && part(s.chunk) > 0)
      add(out, Transfer::Kind::kRecv, Transfer::What::kActivation, s, (r_ + p_ - 1) % p_, s.chunk);
    if (is_backward(s.op) && part(s.chunk) < p_ * v_ - 1)
      add(out, Transfer::Kind::kRecv, Transfer::What::kGradient, s, (r_ + 1) % p_, s.chunk);
    return out;
  }
  std::vector<Transfer> outputs(const Step& s) const {
    std::vector<Transfer> out;
    if (s.op == Instruction::Op::kForward && part(s.chunk) < p_ * v_ - 1)
      add(out, Transfer::Kind::kSend, Transfer::What::kActivation, s, (r_ + 1) % p_,
          r_ == p_ - 1 ? s.chunk + 1 : s.chunk);
    if (is_backward(s.op) && part(s.chunk) > 0)
      add(out, Transfer::Kind::kSend, Transfer::What::kGradient, s, (r_ + p_ - 1) % p_,
          r_ == 0 ? s.chunk - 1 : s.chunk);
    return out;
  }
  // The model's first part loads the inputs, its last the labels.
  bool loads(const Step& s) const {
    return s.op == Instruction::Op::kForward &&
           (part(s.chunk) == 0 || part(s.chunk) == p_ * v_ - 1);
  }

 private:
  static bool is_backward(Instruction::Op op) {
    return op == Instruction::Op::kBackward || op == Instruction::Op::kBackwardInput;
  }
  int part(int chunk) const { return chunk * p_ + r_; }
  void add(std::vector<Transfer>& out, Transfer::Kind kind, Transfer::What what, const Step& s,
           int peer, int chunk) const {
    if (peer != r_) out.push_back(Transfer{kind, what, s.micro, chunk, peer});
  }
  int p_, v_, r_;
};

// A rank's compute order in units: a warm-up forward, a steady-state forward and backward, a
// cool-down backward.
using Units = std::vector<std::vector<Step>>;

// A rank's instructions from its units: before each unit, one batch with the previous unit's
// outputs and this unit's inputs (Megatron's send_forward_backward_recv_forward_backward and its
// kin). With two neighbours that are one rank (p 2), a unit's sends and receives must be in one
// batch: separate blocking batches would each wait for the other's. `send_behind`: a batch of
// sends only is not waited for (a send completes only once its peer has posted the receive, and
// the rank computes meanwhile); the communicator runs it before the rank's next batch.
std::vector<Instruction> with_messages(const Units& units, const Neighbours& n,
                                       bool send_behind = false) {
  std::vector<Instruction> out;
  auto comm = [&](std::vector<Transfer> transfers) {
    if (transfers.empty()) return;
    Instruction in;
    in.op = Instruction::Op::kComm;
    in.wait = !send_behind ||
              std::any_of(transfers.begin(), transfers.end(),
                          [](const Transfer& t) { return t.kind == Transfer::Kind::kRecv; });
    in.transfers = std::move(transfers);
    out.push_back(std::move(in));
  };
  auto step = [&](Instruction::Op op, const Step& s) {
    Instruction in;
    in.op = op;
    in.micro = s.micro;
    in.chunk = s.chunk;
    out.push_back(std::move(in));
  };
  std::vector<Transfer> pending;  // outputs not sent yet
  for (const std::vector<Step>& unit : units) {
    std::vector<Transfer> receives;
    for (const Step& s : unit)
      for (const Transfer& t : n.inputs(s)) receives.push_back(t);
    std::vector<Transfer> batch = std::move(pending);
    pending.clear();
    batch.insert(batch.end(), receives.begin(), receives.end());
    comm(std::move(batch));
    for (const Step& s : unit) {
      if (n.loads(s)) step(Instruction::Op::kLoad, s);
      step(s.op, s);
      for (const Transfer& t : n.outputs(s)) pending.push_back(t);
    }
  }
  comm(std::move(pending));
  for (auto op : {Instruction::Op::kReduceTied, Instruction::Op::kReduce, Instruction::Op::kStep})
    step(op, Step{op, -1, 0});
  return out;
}

// Megatron's forward_backward_pipelining_with_interleaving: the k-th chunk forward of a rank is
// micro-batch (k / (p v)) p + k % p of chunk (k % (p v)) / p; backwards run the chunks in reverse.
std::vector<Instruction> interleaved(int p, int v, int m, int rank) {
  const int total = m * v;
  auto micro_of = [&](int k) { return k / (p * v) * p + k % p; };
  auto chunk_of = [&](int k, bool forward) {
    const int c = k % (p * v) / p;
    return forward ? c : v - 1 - c;
  };
  const int warmup = m == p ? total : std::min((p - rank - 1) * 2 + (v - 1) * p, total);
  auto forward = [&](int k) -> Step {
    return {Instruction::Op::kForward, micro_of(k), chunk_of(k, true)};
  };
  auto backward = [&](int k) -> Step {
    return {Instruction::Op::kBackward, micro_of(k), chunk_of(k, false)};
  };
  Units units;
  for (int k = 0; k < warmup; ++k) units.push_back({forward(k)});
  for (int k = 0; k < total - warmup; ++k) units.push_back({forward(warmup + k), backward(k)});
  for (int k = total - warmup; k < total; ++k) units.push_back({backward(k)});
  return with_messages(units, Neighbours(p, v, rank));
}

// ZB-H1 (Qi et al. 2024; the order of sail-sg's DeepSpeed schedule): rank r runs 1F1B's p - r - 1
// warm-up forwards, then r forwards each with an input-gradient pass B only (deferring r weight
// passes W), then F, B and W together, then the cool-down B and W, then the r deferred W's, which
// fill what 1F1B leaves idle there. Each step is its own unit: a forward's activation leaves
// before the B that follows it, which is what the previous ranks wait for.
std::vector<Instruction> zero_bubble_h1(int p, int m, int rank) {
  Units units;
  int forward = 0, backward = 0, weight = 0;
  auto f = [&] { units.push_back({{Instruction::Op::kForward, forward++, 0}}); };
  auto b = [&] { units.push_back({{Instruction::Op::kBackwardInput, backward++, 0}}); };
  auto w = [&] { units.push_back({{Instruction::Op::kBackwardWeight, weight++, 0}}); };
  for (int i = 0; i < p - rank - 1 && forward < m; ++i) f();
  for (int i = 0; i < rank && forward < m; ++i) f(), b();
  while (forward < m) f(), b(), w();
  while (backward < m) b(), w();
  while (weight < m) w();
  return with_messages(units, Neighbours(p, 1, rank), /*send_behind=*/true);
}

// A message of the batch: sender, receiver, what, micro-batch, chunk.
using MessageKey = std::tuple<int, int, int, int, int>;

MessageKey key_of(int rank, const Transfer& t) {
  const bool send = t.kind == Transfer::Kind::kSend;
  return {send ? rank : t.peer, send ? t.peer : rank, static_cast<int>(t.what), t.micro, t.chunk};
}

// The executor sends a tuple's header before its data (zero::pipe::exchange: the receiver learns
// the sizes from the header), so a comm batch runs as two blocking point-to-point batches, the
// headers and then the data. That equals one atomic batch only when the batch's messages with
// each peer are all in one batch of that peer: otherwise a rank can wait for a header its peer
// sends only after a data message the rank has not posted yet. Splits batches, in the peers'
// order, until that holds on every rank (1F1B's combined batches already hold it).
void match_batches(std::vector<std::vector<Instruction>>& ranks) {
  const int p = static_cast<int>(ranks.size());
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<std::map<MessageKey, int>> batch_of(p);  // per rank: message -> its batch
    for (int r = 0; r < p; ++r)
      for (size_t i = 0; i < ranks[r].size(); ++i)
        for (const Transfer& t : ranks[r][i].transfers)
          batch_of[r][key_of(r, t)] = static_cast<int>(i);
    for (int r = 0; r < p; ++r) {
      std::vector<Instruction> out;
      for (Instruction& in : ranks[r]) {
        // Per peer, the peer's batches that hold this batch's messages, in the peer's order;
        // the k-th of each peer's goes to sub-batch k.
        std::map<int, std::set<int>> peer_batches;
        for (const Transfer& t : in.transfers)
          peer_batches[t.peer].insert(batch_of[t.peer].at(key_of(r, t)));
        size_t parts = 1;
        for (const auto& [peer, batches] : peer_batches) parts = std::max(parts, batches.size());
        if (in.op != Instruction::Op::kComm || parts == 1) {
          out.push_back(std::move(in));
          continue;
        }
        std::vector<Instruction> split(parts, in);
        for (Instruction& part : split) part.transfers.clear();
        for (const Transfer& t : in.transfers) {
          const std::set<int>& batches = peer_batches[t.peer];
          const auto k =
              std::distance(batches.begin(), batches.find(batch_of[t.peer].at(key_of(r, t))));
          split[k].transfers.push_back(t);
        }
        for (Instruction& part : split) out.push_back(std::move(part));
        changed = true;
      }
      ranks[r] = std::move(out);
    }
  }
}

std::vector<Instruction> build(ScheduleKind kind, int stages, int micro_batches, int rank,
                               int chunks) {
  switch (kind) {
    case ScheduleKind::kOneFOneB:
      return one_f_one_b(stages, micro_batches, rank);
    case ScheduleKind::kInterleaved:
      return interleaved(stages, chunks, micro_batches, rank);
    case ScheduleKind::kZeroBubbleH1:
      return zero_bubble_h1(stages, micro_batches, rank);
  }
  throw UsageError("pipeline schedule: unknown kind");
}

}  // namespace

std::vector<Instruction> forward_only(const std::vector<Instruction>& program) {
  std::vector<Instruction> out;
  for (const Instruction& in : program) {
    if (in.op == Instruction::Op::kLoad || in.op == Instruction::Op::kForward) {
      out.push_back(in);
    } else if (in.op == Instruction::Op::kComm) {
      Instruction step = in;
      step.transfers.clear();
      for (const Transfer& t : in.transfers)
        if (t.what == Transfer::What::kActivation) step.transfers.push_back(t);
      if (!step.transfers.empty()) out.push_back(std::move(step));
    }
  }
  return out;
}

std::vector<Instruction> build_schedule(ScheduleKind kind, int stages, int micro_batches, int rank,
                                        int chunks) {
  ZERO_CHECK(stages >= 1 && micro_batches >= 1, UsageError, "pipeline schedule: ", stages,
             " stages and ", micro_batches, " micro-batches; both must be at least 1");
  ZERO_CHECK(rank >= 0 && rank < stages, UsageError, "pipeline schedule: rank ", rank,
             " is outside the ", stages, " stages");
  ZERO_CHECK(kind == ScheduleKind::kInterleaved || chunks == 1, UsageError, "pipeline schedule ",
             to_string(kind), ": ", chunks,
             " model chunks per rank; only the interleaved schedule has more than 1");
  if (kind == ScheduleKind::kInterleaved) {
    ZERO_CHECK(chunks >= 2, ConfigError, "pipeline schedule interleaved: ", chunks,
               " model chunks per rank (pipeline.virtual_stages); it needs at least 2");
    ZERO_CHECK(micro_batches % stages == 0, ConfigError,
               "pipeline schedule interleaved: the micro-batches (", micro_batches,
               ", gradient_accumulation_steps) must be a multiple of the pipeline stages (", stages,
               ")");
  }
  // Every rank's batches, to split them alike (match_batches).
  std::vector<std::vector<Instruction>> ranks;
  for (int r = 0; r < stages; ++r) ranks.push_back(build(kind, stages, micro_batches, r, chunks));
  match_batches(ranks);
  return std::move(ranks[rank]);
}

std::string to_string(const Instruction& in) {
  const std::string micro = std::to_string(in.micro);
  switch (in.op) {
    case Instruction::Op::kLoad:
      return "load" + micro;
    case Instruction::Op::kForward:
      return "F" + micro + (in.chunk ? "." + std::to_string(in.chunk) : "");
    case Instruction::Op::kBackward:
      return "B" + micro + (in.chunk ? "." + std::to_string(in.chunk) : "");
    case Instruction::Op::kBackwardInput:
      return "Bi" + micro;
    case Instruction::Op::kBackwardWeight:
      return "W" + micro;
    case Instruction::Op::kReduceTied:
      return "reduce_tied";
    case Instruction::Op::kReduce:
      return "reduce";
    case Instruction::Op::kStep:
      return "step";
    case Instruction::Op::kComm:
      break;
  }
  std::string out = in.wait ? "comm[" : "comm-behind[";
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

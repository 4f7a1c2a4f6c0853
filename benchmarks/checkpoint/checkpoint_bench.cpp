// Checkpoint throughput against the disk's own limit, both measured in one run on one directory:
// Engine::save_checkpoint vs a raw write+fsync of as many bytes per rank, load_checkpoint into a
// fresh engine vs a raw pread of the rank files. Run under zerorun; see README.md.
#include "raw_io.h"

#include <zero/checkpoint/atomic_files.h>
#include <zero/checkpoint/digest.h>
#include <zero/checkpoint/reader.h>
#include <zero/checkpoint/safetensors.h>
#include <zero/comm/process_group.h>
#include <zero/config/config.h>
#include <zero/engine/engine.h>
#include <zero/engine/sharded.h>
#include <zero/error.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace zero::bench {
namespace {

struct Options {
  std::string dir;              // parent of the run's own work directory
  int64_t params = 90'000'000;  // at least this many parameters
  int64_t width = 4096;         // Linear(width, width) layers
  int stage = 3;
  int64_t chunk_bytes = int64_t{8} << 20;   // raw write / read call size
  int64_t ring_bytes = int64_t{256} << 20;  // raw I/O memory: larger than any CPU cache
  int repeats = 1;                          // timed runs of each phase; the table shows medians
  bool drop_caches = true;                  // before each load and raw read
  bool verify = false;                      // compare parameter sums before save and after load
  bool profile = false;                     // time the parts of a save and a load
  bool keep = false;                        // leave the work directory behind
};

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      ZERO_CHECK(i + 1 < argc, UsageError, "checkpoint_bench: ", a, " needs a value");
      return argv[++i];
    };
    auto number = [&]() -> int64_t {
      const std::string v = value();
      try {
        size_t used = 0;
        const int64_t n = std::stoll(v, &used);
        if (used == v.size()) return n;
      } catch (const std::logic_error&) {
      }
      throw UsageError("checkpoint_bench: " + a + " wants an integer, not '" + v + "'");
    };
    if (a == "--dir")
      o.dir = value();
    else if (a == "--params")
      o.params = number();
    else if (a == "--width")
      o.width = number();
    else if (a == "--stage")
      o.stage = static_cast<int>(number());
    else if (a == "--chunk_mib")
      o.chunk_bytes = number() << 20;
    else if (a == "--ring_mib")
      o.ring_bytes = number() << 20;
    else if (a == "--repeats")
      o.repeats = static_cast<int>(number());
    else if (a == "--no_drop_caches")
      o.drop_caches = false;
    else if (a == "--verify")
      o.verify = true;
    else if (a == "--profile")
      o.profile = true;
    else if (a == "--keep")
      o.keep = true;
    else if (a.rfind("--local_rank", 0) == 0)
      continue;  // zerorun without --no_local_rank
    else
      throw UsageError("checkpoint_bench: unknown argument '" + a + "' (see README.md)");
  }
  ZERO_CHECK(!o.dir.empty(), UsageError, "checkpoint_bench: --dir DIR is required");
  ZERO_CHECK(o.params > 0 && o.width > 0 && o.repeats > 0 && o.chunk_bytes > 0, UsageError,
             "checkpoint_bench: --params, --width, --repeats and --chunk_mib must be positive");
  ZERO_CHECK(o.stage >= 0 && o.stage <= 3, UsageError, "checkpoint_bench: --stage must be 0..3");
  return o;
}

// A stack of Linear(width, width) + tanh, each layer a stage-3 unit.
struct StackImpl : torch::nn::Module {
  torch::nn::ModuleList layers;
  StackImpl(int64_t width, int64_t count) {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < count; ++i)
      layers->push_back(zero::Sharded(torch::nn::Linear(width, width)));
  }
  at::Tensor forward(at::Tensor h) {
    for (auto& layer : *layers) h = torch::tanh(layer->as<zero::ShardedImpl>()->forward(h));
    return h;
  }
};
TORCH_MODULE(Stack);

std::string config_json(int stage) {
  return detail::str(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,)",
      R"( "optimizer": {"type": "AdamW", "params": {"lr": 0.0001, "betas": [0.9, 0.999],)",
      R"( "eps": 1e-8, "weight_decay": 0.01}}, "zero_optimization": {"stage": )", stage,
      R"(, "reduce_bucket_size": 20000000, "allgather_bucket_size": 20000000}})");
}

using Clock = std::chrono::steady_clock;

void barrier(Communicator& comm) {
  comm.barrier()->synchronize();
}

// The wall time of fn on all ranks together: barrier, fn, barrier.
template <typename F>
double timed(Communicator& comm, F&& fn) {
  barrier(comm);
  const auto t0 = Clock::now();
  fn();
  barrier(comm);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Every rank's `mine` (same length everywhere), rank-major.
std::vector<int64_t> gather(Communicator& comm, const std::vector<int64_t>& mine) {
  at::Tensor in = torch::tensor(mine, torch::kLong);
  at::Tensor out = torch::empty({comm.world_size() * in.numel()}, torch::kLong);
  comm.all_gather(in, out)->wait();
  return std::vector<int64_t>(out.data_ptr<int64_t>(), out.data_ptr<int64_t>() + out.numel());
}

int64_t broadcast_value(Communicator& comm, int64_t v) {
  at::Tensor t = torch::tensor({v}, torch::kLong);
  comm.broadcast(t, 0)->wait();
  return t.item<int64_t>();
}

std::string rank_file(const std::string& dir, int rank, const char* ext) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "/rank%05d.%s", rank, ext);
  return dir + buf;
}

int64_t file_bytes(const std::string& path) {
  struct stat st;
  ZERO_CHECK(::stat(path.c_str(), &st) == 0, CheckpointError, "checkpoint_bench: cannot stat ",
             path);
  return static_cast<int64_t>(st.st_size);
}

// Sum of every trainable parameter (stage 3 gathers): equal before save and after load.
std::vector<double> param_sums(Engine& engine) {
  std::vector<double> sums;
  for (const auto& [name, t] : engine.full_parameters())
    sums.push_back(t.to(torch::kDouble).sum().item<double>());
  return sums;
}

// Runs `fn` on one rank per node (local rank 0) between barriers; returns its error text.
std::string on_node_leader(Communicator& comm, bool leader,
                           const std::function<std::string()>& fn) {
  barrier(comm);
  std::string why = leader ? fn() : "";
  barrier(comm);
  return why;
}

// Flushes every dirty page on this node (local rank 0) between barriers.
void sync_node(Communicator& comm, bool leader) {
  on_node_leader(comm, leader, [] {
    ::sync();
    return std::string();
  });
}

// Removes the run's directory (rank 0) on every way out of run().
struct WorkDir {
  bool owner;
  std::string path;
  ~WorkDir() {
    std::error_code ec;
    if (owner) std::filesystem::remove_all(path, ec);
  }
};

// Seconds of every run of each phase; the table shows the median (the machine is shared).
struct Runs {
  double warmup_save = 0;
  std::vector<double> save, raw_write, load, raw_read;
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  static std::string list(const std::vector<double>& v) {
    std::ostringstream out;
    for (double x : v)
      out << (out.tellp() > 0 ? " " : "") << std::fixed << std::setprecision(2) << x;
    return out.str();
  }
};

// The least wall time of `repeats` runs of fn on all ranks at once; `before` runs untimed first.
template <typename F>
double best_of(Communicator& comm, int repeats, const std::function<void()>& before, F&& fn) {
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    before();
    best = std::min(best, timed(comm, fn));
  }
  return best;
}

// --profile: where the time of a save and a load goes on this disk, each part on all ranks at
// once, best of `repeats`. `bytes`: this rank's file; `psi`: the model's parameters.
void profile(Communicator& comm, bool leader, const std::string& work, int64_t bytes, int64_t psi,
             int stage, ChunkRing& ring, int repeats, double save_s, double raw_s) {
  const int rank = comm.rank(), world = comm.world_size();
  const std::string dir = work + "/profile";
  if (rank == 0) std::filesystem::create_directories(dir);
  barrier(comm);
  const std::string bin = rank_file(dir, rank, "bin"), st = rank_file(dir, rank, "safetensors");
  auto remove_files = [&] {
    std::filesystem::remove(bin);
    std::filesystem::remove(st);
    sync_node(comm, leader);
  };
  // A shard-sized buffer of non-zero floats, like the master and moments the engine writes.
  at::Tensor shard = torch::rand({bytes / 4}, torch::kFloat) + 0.5;
  const auto* data = static_cast<const char*>(shard.data_ptr());
  volatile uint32_t crc = 0;
  const double crc_s = best_of(
      comm, repeats, [] {}, [&] { crc = ckpt::crc32c(data, shard.nbytes()); });
  at::Tensor copy = torch::empty_like(shard);
  const double copy_s = best_of(
      comm, repeats, [] {}, [&] { copy.copy_(shard); });
  // The safetensors writer alone (staging, CRC32C, write(2), fsync) on 24 tensors per rank.
  std::vector<ckpt::TensorToWrite> tensors;
  const int64_t pieces = 24, per = shard.numel() / pieces;
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t n = i + 1 < pieces ? per : shard.numel() - per * i;
    tensors.push_back(
        {"t" + std::to_string(i), ckpt::DType::kF32, {n}, shard.data_ptr<float>() + per * i});
  }
  const double writer_s =
      best_of(comm, repeats, remove_files, [&] { ckpt::write_safetensors(st, tensors); });
  // Raw write split into copy and fsync, and raw write with early write-back every 64 MiB.
  // Each keeps the split of this rank's fastest run.
  auto raw_write = [&](int64_t writeback_every, WriteTimes* fastest) {
    const WriteTimes t = raw_write_file(bin, bytes, ring, writeback_every);
    if (t.write_s + t.fsync_s < fastest->write_s + fastest->fsync_s) *fastest = t;
  };
  WriteTimes plain{1e300, 0}, early{1e300, 0};
  const double plain_s = best_of(comm, repeats, remove_files, [&] { raw_write(0, &plain); });
  const double early_s =
      best_of(comm, repeats, remove_files, [&] { raw_write(int64_t{64} << 20, &early); });
  remove_files();
  // What a save adds around the files: the temporary directory, the manifest, publish, latest.
  int k = 0;
  const double publish_s = best_of(
      comm, repeats, [] {},
      [&] {
        if (rank != 0) return;
        const std::string tag = "publish" + std::to_string(k++);
        const std::string temp = ckpt::make_temp_dir(dir, tag, ckpt::unique_nonce());
        ckpt::atomic_write_file(temp + "/manifest.json", std::string(16384, ' '));
        ckpt::publish_dir(temp, dir + "/" + tag);
        ckpt::atomic_write_file(dir + "/latest", tag + "\n");
      });
  // What a load at stages 1-2 saves on one CPU node by reading the full parameters from the
  // files: an all-gather of every parameter to every rank (still done across nodes or on a GPU).
  const int64_t gather_numel = (psi + world - 1) / world;
  at::Tensor in = torch::rand({gather_numel}), out = torch::empty({gather_numel * world});
  const double gather_s = best_of(
      comm, repeats, [] {}, [&] { comm.all_gather(in, out)->wait(); });

  const auto parts = gather(
      comm, {static_cast<int64_t>(plain.write_s * 1e6), static_cast<int64_t>(plain.fsync_s * 1e6),
             static_cast<int64_t>(early.write_s * 1e6), static_cast<int64_t>(early.fsync_s * 1e6)});
  if (rank != 0) return;
  auto slowest = [&](int j) {
    int64_t m = 0;
    for (int r = 0; r < world; ++r) m = std::max(m, parts[4 * r + j]);
    return m / 1e6;
  };
  const double gb = static_cast<double>(bytes) * world / 1e9;
  auto row = [&](const char* what, double sec, double part_gb, const std::string& note) {
    std::printf(
        "| %s | %.3f | %s | %s |\n", what, sec,
        part_gb > 0 ? detail::str(std::fixed, std::setprecision(2), part_gb / sec).c_str() : "-",
        note.c_str());
  };
  std::printf(
      "\nprofile: %d ranks, stage %d, %.3f GB of rank files in all, every part on all ranks "
      "at once, best of %d\n\n| part | s | GB/s | note |\n|---|---|---|---|\n",
      world, stage, gb, repeats);
  row("save_checkpoint (table: median)", save_s, gb, "the whole collective call");
  row("raw write + fsync (table: median)", raw_s, gb,
      detail::str("write(2) of ", ring.chunk_bytes() >> 20, " MiB chunks, then fsync"));
  row("crc32c of the shard in memory", crc_s, gb, "CPU only, one thread per rank");
  row("memcpy of the shard", copy_s, gb, "CPU only (a host copy of master + moments)");
  row("ckpt::write_safetensors alone", writer_s, gb, "CRC32C + write(2) + fsync, no engine");
  row("raw write + fsync, again", plain_s, gb,
      detail::str("write(2) ", std::setprecision(3), slowest(0), " s + fsync ", slowest(1),
                  " s (slowest rank, its best run)"));
  row("raw write, write-back every 64 MiB", early_s, gb,
      detail::str("sync_file_range(WRITE) per 64 MiB: write(2) ", std::setprecision(3), slowest(2),
                  " s + fsync ", slowest(3), " s"));
  row("temp dir + manifest + publish + latest", publish_s, 0,
      "rank 0: 4 fsynced renames/writes of small files and directories");
  row("all_gather of all parameters (fp32)", gather_s, 4.0 * gather_numel * world / 1e9,
      "a stage 1-2 load's all-gather across nodes or on a GPU");
}

int run(const Options& o) {
  torch::set_num_threads(1);
  spdlog::set_level(spdlog::level::warn);
  auto comm = world_communicator();
  const int rank = comm->rank(), world = comm->world_size();
  const bool leader = detect_rank_env().local_rank == 0;

  // The run's own directory under --dir, named by rank 0.
  std::random_device rd;
  const int64_t nonce = broadcast_value(*comm, (static_cast<int64_t>(rd()) << 20) ^ rd());
  const std::string work = o.dir + "/checkpoint_bench-" + std::to_string(nonce);
  if (rank == 0) std::filesystem::create_directories(work + "/raw");
  const WorkDir cleanup{rank == 0 && !o.keep, work};
  barrier(*comm);

  const int64_t layers = (o.params + o.width * (o.width + 1) - 1) / (o.width * (o.width + 1));
  ConfigOptions copt;
  copt.world_size = world;
  const ParsedConfig config = parse_config_string(config_json(o.stage), copt);
  ChunkRing ring(static_cast<size_t>(o.ring_bytes), static_cast<size_t>(o.chunk_bytes));
  Runs runs;
  int64_t my_bytes = 0, total_bytes = 0, manifest_bytes = 0, psi = 0;
  std::string ckpt_dir, tag;
  std::vector<double> sums_saved;
  std::vector<int64_t> rss;  // peak RSS after: step, saves, raw writes, fresh engine, loads

  {  // Phase 1: train one step, then save and raw-write, `repeats` times.
    torch::manual_seed(1234);
    Stack model(o.width, layers);
    for (const auto& p : model->parameters()) psi += p.numel();
    Engine engine = initialize(model.ptr(), config);
    torch::manual_seed(100 + rank);
    at::Tensor x = torch::randn({2, o.width});
    engine.backward(model->forward(x).square().mean());
    engine.step();
    if (o.verify) sums_saved = param_sums(engine);
    rss.push_back(peak_rss_bytes());
    // Every timed write starts right after the previous write's files were deleted, so that the
    // save and the raw write both reuse the page-cache memory just freed: in a VM, memory left
    // unused for a few seconds can be handed back to the host and is then slow to touch again
    // (README.md). An untimed first save learns the file size and warms up.
    const std::string raw = rank_file(work + "/raw", rank, "bin");
    auto save = [&](const std::string& t) {
      sync_node(*comm, leader);
      tag = t;
      const double sec = timed(*comm, [&] { ckpt_dir = engine.save_checkpoint(work, tag); });
      my_bytes = file_bytes(rank_file(ckpt_dir, rank, "safetensors"));
      barrier(*comm);  // every rank has seen its file
      return sec;
    };
    runs.warmup_save = save("warmup");
    for (int i = 0; i < o.repeats; ++i) {
      if (rank == 0) std::filesystem::remove_all(ckpt_dir);
      sync_node(*comm, leader);
      runs.raw_write.push_back(timed(*comm, [&] { raw_write_file(raw, my_bytes, ring); }));
      std::filesystem::remove(raw);
      runs.save.push_back(save("bench" + std::to_string(i)));
    }
    rss.push_back(peak_rss_bytes());
    for (int64_t b : gather(*comm, {my_bytes})) total_bytes += b;
    if (rank == 0) manifest_bytes = ckpt::CheckpointReader(ckpt_dir).manifest().total_state_bytes();
    if (o.profile) {
      profile(*comm, leader, work, my_bytes, psi, o.stage, ring, o.repeats, Runs::median(runs.save),
              Runs::median(runs.raw_write));
      rss.push_back(peak_rss_bytes());
    }
  }

  // Phase 2: a fresh engine (other initial values) loads; then the raw read of the same files.
  torch::manual_seed(4321);
  Stack model(o.width, layers);
  Engine engine = initialize(model.ptr(), config);
  rss.push_back(peak_rss_bytes());
  std::string cache_note;
  int64_t read_bytes = 0;
  auto load = [&] {
    if (o.drop_caches) cache_note = on_node_leader(*comm, leader, drop_page_cache);
    runs.load.push_back(timed(*comm, [&] { engine.load_checkpoint(work, tag); }));
  };
  auto raw_read = [&] {
    if (o.drop_caches) on_node_leader(*comm, leader, drop_page_cache);
    runs.raw_read.push_back(timed(*comm, [&] {
      read_bytes = raw_read_file(rank_file(ckpt_dir, rank, "safetensors"), ring);
    }));
  };
  for (int i = 0; i < o.repeats; ++i) {
    if (i % 2 == 0) {
      load();
      raw_read();
    } else {
      raw_read();
      load();
    }
  }
  rss.push_back(peak_rss_bytes());
  ZERO_CHECK(engine.global_steps() == 1, InternalError, "checkpoint_bench: loaded global_steps ",
             engine.global_steps(), ", saved 1");
  std::string verify_note;
  if (o.verify) {
    const std::vector<double> loaded = param_sums(engine);
    ZERO_CHECK(loaded == sums_saved, InternalError,
               "checkpoint_bench: parameters after load differ from those saved");
    verify_note = detail::str("; --verify: the ", loaded.size(),
                              " parameter sums after load equal those saved");
  }
  int64_t total_read = 0;
  for (int64_t b : gather(*comm, {read_bytes})) total_read += b;
  const std::vector<int64_t> all_rss = gather(*comm, rss);
  const auto cache_state = gather(*comm, {cache_note.empty() ? 0 : 1});

  if (rank == 0) {
    const double gb = static_cast<double>(total_bytes) / 1e9;
    const bool dropped =
        o.drop_caches && std::count(cache_state.begin(), cache_state.end(), 1) == 0;
    std::printf(
        "checkpoint_bench: %lld parameters (%lld x Linear(%lld, %lld)), stage %d, %d ranks, "
        "%s; rank files %lld bytes (manifest: %lld), median of %d runs%s\n",
        static_cast<long long>(psi), static_cast<long long>(layers),
        static_cast<long long>(o.width), static_cast<long long>(o.width), o.stage, world,
        work.c_str(), static_cast<long long>(total_bytes), static_cast<long long>(manifest_bytes),
        o.repeats, verify_note.c_str());
    std::printf("checkpoint_bench: page cache before each load and raw read: %s\n",
                !o.drop_caches ? "kept (--no_drop_caches)"
                : dropped      ? "dropped (echo 3 > /proc/sys/vm/drop_caches)"
                               : ("not dropped: " + cache_note).c_str());
    std::printf("checkpoint_bench: checkpoint %.3f GB\n", gb);
    std::printf(
        "| ranks | stage | save s | save GB/s | raw write GB/s | save/raw | load s | load GB/s "
        "| raw read GB/s | load/raw |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    const double save_s = Runs::median(runs.save), raw_write_s = Runs::median(runs.raw_write);
    const double load_s = Runs::median(runs.load), raw_read_s = Runs::median(runs.raw_read);
    const double read_gb = static_cast<double>(total_read) / 1e9;
    std::printf("| %d | %d | %.2f | %.2f | %.2f | %.0f%% | %.2f | %.2f | %.2f | %.0f%% |\n",
                world, o.stage, save_s, gb / save_s, gb / raw_write_s,
                100 * raw_write_s / save_s, load_s, gb / load_s, read_gb / raw_read_s,
                100 * (gb / load_s) / (read_gb / raw_read_s));
    std::printf(
        "checkpoint_bench: every run, s: save %s (untimed warm-up save %.2f); raw write %s; load "
        "%s; raw read %s\n",
        Runs::list(runs.save).c_str(), runs.warmup_save, Runs::list(runs.raw_write).c_str(),
        Runs::list(runs.load).c_str(), Runs::list(runs.raw_read).c_str());
    std::printf(
        "checkpoint_bench: peak RSS MiB after step / saves+raw writes%s / fresh engine / "
        "loads+raw reads:",
        o.profile ? " / profile" : "");
    const size_t k = rss.size();
    for (int r = 0; r < world; ++r) {
      std::printf(" rank %d:", r);
      for (size_t j = 0; j < k; ++j)
        std::printf("%s%.0f", j ? " / " : " ", all_rss[r * k + j] / 1048576.0);
      std::printf(r + 1 < world ? ";" : "\n");
    }
    std::fflush(stdout);
  }
  barrier(*comm);
  return 0;
}

}  // namespace
}  // namespace zero::bench

int main(int argc, char** argv) {
  try {
    return zero::bench::run(zero::bench::parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;  // the messages name checkpoint_bench
    return 1;
  }
}

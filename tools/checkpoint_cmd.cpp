// `zero checkpoint inspect DIR [--tag T] [--verify]`: what a checkpoint holds (world, stage,
// precision, counters, files, parameters) from its manifest, and with --verify every file's CRC32C.
// Also `zero checkpoint` alone, which lists the checkpoint sub-commands.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <zero/checkpoint/manifest.h>
#include <zero/checkpoint/reader.h>
#include <zero/error.h>

#include "checkpoint_common.h"
#include "command.h"

namespace zero::tools {
namespace {

constexpr const char* kInspectUsage =
    "usage: zero checkpoint inspect DIR [--tag T] [--verify]\n"
    "Prints what the checkpoint DIR/<tag> holds (tag: --tag, else the one DIR/latest names; DIR\n"
    "may also be a tag directory itself): world size, stage, precision, optimizer, state kinds,\n"
    "step counters, loss scaler, client_state, its files and every parameter and buffer.\n"
    "  --verify   also recompute every rank file's CRC32C against the manifest\n"
    "Exit 0 when the checkpoint is complete (and with --verify intact); 1 with one error line.";

constexpr const char* kCheckpointUsage =
    "usage: zero checkpoint inspect DIR [--tag T] [--verify]\n"
    "       zero checkpoint export DIR OUT [--tag T] [--dtype fp32|bf16|fp16]\n"
    "                          [--format safetensors|torch] [--max-shard-size 5GB]\n"
    "Run `zero checkpoint inspect --help` or `zero checkpoint export --help` for details.";

void print_counters(const ckpt::Manifest& m) {
  std::cout << "counters:      global_steps " << m.global_steps << ", micro_steps " << m.micro_steps
            << ", skipped_steps " << m.skipped_steps << ", optimizer_steps " << m.optimizer_steps
            << ", scheduler_steps " << m.scheduler_steps << "\n";
  if (m.loss_scaler) {
    const ckpt::LossScalerState& s = *m.loss_scaler;
    std::cout << "loss scaler:   scale " << s.scale << ", hysteresis_left " << s.hysteresis_left
              << ", iteration " << s.iteration << ", last_overflow_iteration "
              << s.last_overflow_iteration << "\n";
  } else {
    std::cout << "loss scaler:   none\n";
  }
  std::cout << "client_state:  "
            << m.client_state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
}

// Lists the rank files with their sizes and checks, cheaply, that each is on disk with the
// manifest's size; returns the first problem ("" when none).
std::string print_files(const ckpt::Manifest& m, const std::string& dir) {
  std::cout << "files:         " << m.files.size() << ", " << grouped(m.total_state_bytes())
            << " bytes (" << size_text(m.total_state_bytes()) << ")\n";
  std::string problem;
  for (const ckpt::ManifestFile& f : m.files) {
    const std::string path = dir + "/" + f.name;
    struct stat st {};
    std::string note;
    if (::stat(path.c_str(), &st) != 0) {
      note = "  MISSING";
      if (problem.empty()) problem = "checkpoint: " + path + ": missing (the manifest lists it)";
    } else if (st.st_size != f.bytes) {
      note = "  SIZE " + grouped(st.st_size) + " on disk";
      if (problem.empty())
        problem = detail::str("checkpoint: ", path, ": is ", st.st_size, " bytes but the ",
                              "manifest says ", f.bytes, " (truncated, replaced or corrupted)");
    }
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", f.crc32c);
    const std::string of_tensor_rank =
        m.tensor_parallel_size > 1 ? detail::str("  tensor rank ", f.tensor_rank) : std::string();
    std::printf("  %-24s %16s bytes  crc32c %s  %zu pieces%s%s\n", shown(f.name).c_str(),
                grouped(f.bytes).c_str(), crc, f.pieces.size(), of_tensor_rank.c_str(),
                note.c_str());
  }
  std::fflush(stdout);
  return problem;
}

template <typename Entry>
void print_tensors(const char* heading, const std::vector<Entry>& entries) {
  int64_t numel = 0;
  size_t width = 0;
  for (const Entry& e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    numel += n;
    width = std::max(width, std::min<size_t>(shown(e.name).size(), 60));
  }
  std::printf("%-14s %zu, %s elements\n", heading, entries.size(), grouped(numel).c_str());
  for (const Entry& e : entries)
    std::printf("  %-*s  %-5s %s\n", static_cast<int>(width), shown(e.name).c_str(),
                e.dtype.c_str(), shape_text(e.shape).c_str());
  std::fflush(stdout);
}

void print_manifest(const ckpt::Manifest& m, const std::string& dir) {
  std::string kinds;
  for (const std::string& k : m.state_kinds) kinds += (kinds.empty() ? "" : ", ") + k;
  std::cout << "checkpoint:    " << dir << "\n"
            << "tag:           " << shown(m.tag) << "  (format version " << m.format_version
            << ")\n"
            << "world size:    " << m.world_size << "\n";
  if (m.tensor_parallel_size > 1)
    std::cout << "tensor parallel: " << m.tensor_parallel_size
              << " (each tensor rank's files hold its slices of the split parameters; the "
                 "shapes below are the whole tensors')\n";
  if (m.pipeline_parallel_size > 1)
    std::cout << "pipeline:      " << m.pipeline_parallel_size
              << " stages (each stage's files hold its layers)\n";
  std::cout << "stage:         " << m.stage << "\n"
            << "precision:     " << m.precision << "\n"
            << "optimizer:     " << shown(m.optimizer) << "\n"
            << "state kinds:   " << kinds << "\n"
            << "config hash:   " << shown(m.config_hash) << "\n";
  print_counters(m);
}

// Recomputes the CRC32C of every rank file, one file at a time so the bar moves.
void verify_files(ckpt::CheckpointReader& reader) {
  const ckpt::Manifest& m = reader.manifest();
  Progress progress("verify", m.total_state_bytes());
  for (const ckpt::ManifestFile& f : m.files) {
    reader.verify({f.rank});
    progress.advance(f.bytes);
  }
  progress.finish();
  std::printf("checksums ok (%zu files, %s) in %.1f s (%s)\n", m.files.size(),
              size_text(m.total_state_bytes()).c_str(), progress.seconds(),
              rate_text(m.total_state_bytes(), progress.seconds()).c_str());
}

int run_inspect(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << kInspectUsage << "\n";
    return kCkptOk;
  }
  try {
    const FlagArgs a = parse_flag_args(args, {"--tag"}, {"--verify"});
    ZERO_CHECK(a.positional.size() == 1, UsageError, "expected one DIR, got ", a.positional.size(),
               " arguments (see zero checkpoint inspect --help)");
    const std::string dir = find_checkpoint_dir(a.positional[0], a.value("--tag"));
    ckpt::CheckpointReader reader(dir);
    const ckpt::Manifest& m = reader.manifest();
    print_manifest(m, dir);
    const std::string problem = print_files(m, dir);
    print_tensors("parameters:", m.params);
    print_tensors("buffers:", m.buffers);
    if (!problem.empty()) throw CheckpointError(problem);
    if (a.has("--verify")) verify_files(reader);
    return kCkptOk;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "zero checkpoint inspect: error: " << e.what() << "\n";
    return kCkptFail;
  }
}

int run_checkpoint(const std::vector<std::string>& args) {
  const bool help = wants_help(args);
  if (!help && args.size() > 1)
    std::cerr << "zero checkpoint: unknown sub-command '" << args[1] << "'\n";
  (help ? std::cout : std::cerr) << kCheckpointUsage << "\n";
  return help ? kCkptOk : kCkptFail;
}

}  // namespace

ZERO_COMMAND("checkpoint inspect",
             "what a checkpoint holds (world, stage, counters, files, parameters): DIR [--tag T] "
             "[--verify]",
             run_inspect);
ZERO_COMMAND("checkpoint",
             "checkpoint tools: `checkpoint inspect` and `checkpoint export` (--help for each)",
             run_checkpoint);

}  // namespace zero::tools

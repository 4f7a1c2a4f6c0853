// gpt_train: trains the small GPT of model.h on a text file with the ZeRO engine, one process
// per rank (zerorun --nproc_per_node 2 gpt_train --deepspeed_config ds_config_stage3.json).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include <sys/resource.h>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <torch/version.h>
#ifdef ZERO_GPT_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <zero/engine/allocations.h>
#include <zero/engine/args.h>
#include <zero/engine/activation/checkpointed.h>
#include <zero/engine/distributed_sampler.h>
#include <zero/engine/engine.h>
#include <zero/engine/load_state_dict.h>
#include <zero/engine/sharded.h>
#include <zero/error.h>
#include <zero/tp/random.h>

#include "data.h"
#include "model.h"
#include "pipeline.h"
#include "sample.h"

namespace {

constexpr const char* kUsage =
    "usage: gpt_train --deepspeed_config FILE [--data TEXT_FILE] [--steps N] [--seed S]\n"
    "                 [--preset gpt2-small] [--n-layer L] [--n-head H] [--d-model D]\n"
    "                 [--context T] [--dropout P] [--checkpoint-activations]\n"
    "                 [--tp N [--sequence-parallel]]   (tensor parallelism: "
    "tensor_parallel.autotp_size)\n"
    "                 [--pp N [--schedule 1f1b|interleaved|zb-h1] [--virtual-stages V]]\n"
    "                 (pipeline stages: pipeline.stages; the model as pipeline layers, the "
    "embedding tied to the head)\n"
    "                 [--sample N [--temperature T]] [--device cpu|cuda] [--json_summary]\n"
    "                 [--save_dir DIR [--save_every N]]   (resumes from DIR/latest when present)\n"
    "                 [--load_weights FILE]   (start from exported weights: zero checkpoint "
    "export)\n"
    "                 [--data_order steps|epochs]   (steps: windows drawn per step; epochs: "
    "zero::DistributedSampler over the text's windows, its position in checkpoints)\n"
    "                 [--set KEY=VALUE ...]   (a ds_config value, as `zero config --set`)";

struct Options {
  std::string data = ZERO_GPT_DEFAULT_DATA;
  int64_t steps = 0;  // 0: the scheduler's total_num_steps, else 300
  uint64_t seed = 1234;
  bool cuda = false;  // --device cuda: model and batches on cuda:LOCAL_RANK
  // One final JSON line from rank 0: loss, ms/step, peak memory; and from every other rank its
  // parameters and peak memory (stages and tensor ranks hold different shares).
  bool json_summary = false;
  std::string save_dir;  // checkpoints: resume from its latest, save every N and at the end
  int64_t save_every = 0;
  std::string load_weights;  // an export (safetensors or torch format) to start from
  // "steps": each step draws its windows from (seed, step); "epochs": zero::DistributedSampler
  // over the text's non-overlapping windows (an elastic restart keeps its position).
  std::string data_order = "steps";
  bool checkpoint_activations = false;  // each block in zero::Checkpointed (inside zero::Sharded)
  bool pipeline = false;                // --pp: the model as zero::pipe layers (pipeline.h)
  int64_t sample = 0;                   // characters rank 0 prints after training
  double temperature = 0.8;             // of the sample; 0 = greedy
  std::map<std::string, std::string> config_overrides;  // --set dotted.key=value; --tp
  gpt::GptConfig model;
};

// GPT-2 small's shape (124M with its 50k-token vocabulary; ~85M with characters).
void apply_preset(const std::string& name, gpt::GptConfig& m) {
  ZERO_CHECK(name == "gpt2-small", zero::UsageError, "--preset: unknown preset '", name,
             "' (known: gpt2-small)");
  m.n_layer = 12;
  m.n_head = 12;
  m.d_model = 768;
  m.context = 256;
}

Options parse_options(const std::vector<std::string>& rest) {
  Options o;
  o.model.n_layer = 3;
  o.model.n_head = 4;
  o.model.d_model = 128;
  o.model.context = 64;
  // A preset sets the shape first, so that --context and friends override it in any order.
  for (size_t i = 0; i + 1 < rest.size(); ++i)
    if (rest[i] == "--preset") apply_preset(rest[i + 1], o.model);
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& flag = rest[i];
    if (flag == "--json_summary" || flag == "--checkpoint-activations") {
      (flag == "--json_summary" ? o.json_summary : o.checkpoint_activations) = true;
      continue;
    }
    if (flag == "--sequence-parallel") {
      o.model.sequence_parallel = true;
      continue;
    }
    ZERO_CHECK(i + 1 < rest.size(), zero::UsageError, flag,
               ": missing value (or unknown argument)\n", kUsage);
    const std::string& value = rest[++i];
    auto number = [&]() {
      char* end = nullptr;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      ZERO_CHECK(end && *end == '\0' && v >= 0, zero::UsageError, flag, ": '", value,
                 "' is not a count");
      return static_cast<int64_t>(v);
    };
    auto real = [&](double max) {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      ZERO_CHECK(end && *end == '\0' && v >= 0 && v < max, zero::UsageError, flag, ": '", value,
                 "' is not a number in [0, ", max, ")");
      return v;
    };
    if (flag == "--data")
      o.data = value;
    else if (flag == "--steps")
      o.steps = number();
    else if (flag == "--save_dir")
      o.save_dir = value;
    else if (flag == "--load_weights")
      o.load_weights = value;
    else if (flag == "--save_every")
      o.save_every = number();
    else if (flag == "--data_order") {
      ZERO_CHECK(value == "steps" || value == "epochs", zero::UsageError,
                 "--data_order: 'steps' or 'epochs', got '", value, "'");
      o.data_order = value;
    } else if (flag == "--seed")
      o.seed = static_cast<uint64_t>(number());
    else if (flag == "--n-layer")
      o.model.n_layer = number();
    else if (flag == "--n-head")
      o.model.n_head = number();
    else if (flag == "--d-model")
      o.model.d_model = number();
    else if (flag == "--context")
      o.model.context = number();
    else if (flag == "--preset")
      continue;  // applied above
    else if (flag == "--tp")
      o.config_overrides["tensor_parallel.autotp_size"] = std::to_string(number());
    else if (flag == "--pp") {
      o.config_overrides["pipeline.stages"] = std::to_string(number());
      o.pipeline = true;
    } else if (flag == "--schedule")
      o.config_overrides["pipeline.schedule"] = value;
    else if (flag == "--virtual-stages")
      o.config_overrides["pipeline.virtual_stages"] = std::to_string(number());
    else if (flag == "--set") {
      const size_t eq = value.find('=');
      ZERO_CHECK(eq != std::string::npos && eq > 0, zero::UsageError,
                 "--set: expected KEY=VALUE, got '", value, "'");
      o.config_overrides[value.substr(0, eq)] = value.substr(eq + 1);
    } else if (flag == "--dropout")
      o.model.dropout = real(1.0);
    else if (flag == "--sample")
      o.sample = number();
    else if (flag == "--temperature")
      o.temperature = real(100.0);
    else if (flag == "--device") {
      ZERO_CHECK(value == "cpu" || value == "cuda", zero::UsageError,
                 "--device: expected cpu or cuda, got '", value, "'");
      o.cuda = value == "cuda";
    } else
      throw zero::UsageError("unknown argument '" + flag + "'\n" + kUsage);
  }
  // Sequence-parallel blocks leave each tensor rank its own part of the sequence: what crosses
  // pipeline stages then goes whole from each tensor rank, not as 1/tp slices of one tensor.
  if (o.model.sequence_parallel && o.pipeline)
    for (const char* key : {"pipeline.pipe_partitioned", "pipeline.grad_partitioned"})
      o.config_overrides.emplace(key, "false");
  return o;
}

// One intra-op thread per core share, so ranks on one host do not oversubscribe it.
void set_threads() {
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / ranks_here));
}

// cuda:LOCAL_RANK (one GPU per rank on a host), after checking that LibTorch sees it.
torch::Device cuda_device() {
  ZERO_CHECK(torch::cuda::is_available(), zero::UsageError,
             "--device cuda: this LibTorch has no CUDA or sees no GPU");
  const char* local = std::getenv("LOCAL_RANK");
  const int64_t index = local ? std::atoll(local) : 0;
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  ZERO_CHECK(index < count, zero::UsageError, "LOCAL_RANK ", index, " but only ", count,
             " CUDA device(s)");
  return torch::Device(torch::kCUDA, static_cast<torch::DeviceIndex>(index));
}

// Peak memory for --json_summary: on CUDA the caching allocator's peak of allocated bytes
// (index 0 of the stat arrays is the aggregate pool in LibTorch 1.13 and 2.x); on the CPU the
// process's peak resident set.
int64_t peak_memory_bytes(const torch::Device& device, std::string* source) {
#ifdef ZERO_GPT_TORCH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    *source = "cuda_caching_allocator_peak_allocated";
    return static_cast<int64_t>(stats.allocated_bytes[0].peak);
  }
#endif
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  *source = "cpu_peak_rss";
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

// Matmul flops of one sample's forward: 2 x (dense weights: 12 d^2 per layer, the tied head
// V d) per token, plus attention's two T x T x d products per layer; backward is twice that.
double train_flops_per_sample(const gpt::GptConfig& c) {
  const double T = c.context, d = c.d_model, L = c.n_layer, V = c.vocab_size;
  const double forward = 2 * T * (12 * L * d * d + V * d) + 4 * L * T * T * d;
  return 3 * forward;
}

int train(int argc, char** argv) {
  const zero::Args args = zero::parse_args(argc, argv);
  ZERO_CHECK(!args.config_path.empty(), zero::UsageError, "--deepspeed_config FILE is required\n",
             kUsage);
  Options o = parse_options(args.rest);
  set_threads();
  // What a step allocates in steady state (after the second: the first records stage 3's order
  // and makes the engine's buffers, the second may still grow a staging buffer the first did not
  // use): the CPU allocator's count and bytes, for --json_summary. Counted from before the model
  // exists, so that storages freed and allocated again (stage 3's parameters) count too.
  if (o.json_summary) zero::count_cpu_allocations();

  const std::string text = gpt::read_text_file(o.data);
  const gpt::CharTokenizer tokenizer(text);
  const gpt::TextDataset data(tokenizer.encode(text), o.model.context, o.seed);
  o.model.vocab_size = tokenizer.vocab_size();

  // The world (NCCL when the model will live on CUDA) and the config resolved for it; with
  // tensor_parallel.autotp_size > 1 the dp x tp grid, whose tensor group splits the model.
  const std::shared_ptr<zero::Communicator> world =
      zero::world_communicator(o.cuda ? zero::Backend::kNccl : zero::Backend::kGloo);
  zero::ConfigOptions config_options;
  config_options.world_size = world->world_size();
  config_options.overrides = o.config_overrides;
  const zero::ParsedConfig parsed = zero::parse_config_file(args.config_path, config_options);
  std::optional<zero::ParallelGrid> grid;
  ZERO_CHECK(!o.model.sequence_parallel || parsed.config.tensor_parallel_size > 1, zero::UsageError,
             "--sequence-parallel splits the sequence over the tensor-parallel ",
             "ranks: give --tp N with N > 1 (or tensor_parallel.autotp_size)");
  ZERO_CHECK(!o.pipeline || o.sample == 0, zero::UsageError,
             "--sample needs the whole model on every rank; not with --pp");
  if (o.pipeline || parsed.config.tensor_parallel_size > 1)
    grid = zero::parallel_grid(parsed.config, world);
  if (parsed.config.tensor_parallel_size > 1) {
    const int tp = grid->tensor_size();
    ZERO_CHECK(o.model.n_head % tp == 0 && o.model.vocab_size % tp == 0, zero::UsageError, "--tp ",
               tp, ": the tensor-parallel degree must divide the heads (", o.model.n_head,
               ") and the vocabulary (", o.model.vocab_size, " characters)");
    ZERO_CHECK(!o.model.sequence_parallel || (o.model.context % tp == 0 && o.sample == 0),
               zero::UsageError, "--sequence-parallel: the tensor-parallel degree ", tp,
               " must divide the context (", o.model.context,
               "), and --sample (whose prompts grow one token at a time) is not available");
    o.model.tensor_group = grid->tensor_group();
    // Split regions (this rank's attention heads) draw from the tracker, the rest alike.
    zero::tp::rng_tracker().seed(o.seed, grid->tensor_rank());
  }

  torch::manual_seed(o.seed);
  const torch::Device device = o.cuda ? cuda_device() : torch::Device(torch::kCPU);
  gpt::Gpt model{nullptr};
  zero::pipe::PipelineModule stages{nullptr};
  std::shared_ptr<torch::nn::Module> net;
  if (o.pipeline) {
    // Each stage builds its layers only, each after seed + its index.
    const int chunks = parsed.config.pipeline_schedule == "interleaved"
                           ? parsed.config.pipeline_virtual_stages
                           : 1;
    stages =
        zero::pipe::PipelineModule(*grid, gpt::pipeline_layers(o.model, o.checkpoint_activations),
                                   zero::pipe::PipelineOptions()
                                       .base_seed(static_cast<int64_t>(o.seed))
                                       .virtual_stages(chunks)
                                       .loss_fn(gpt::pipeline_loss));
    net = stages.ptr();
  } else {
    model = gpt::Gpt(o.model);
    // ZeRO stage 3 shards block by block; at stages 0-2 the wrapper is a pass-through.
    // Checkpointing inside the stage 3 wrapper: the recompute runs while backward has the block
    // gathered anyway.
    model->wrap_blocks([&o](torch::nn::AnyModule block) {
      if (o.checkpoint_activations) block = torch::nn::AnyModule(zero::Checkpointed(block));
      return torch::nn::AnyModule(zero::Sharded(block));
    });
    net = model.ptr();
  }
  // The engine picks NCCL when the parameters are on CUDA, so they must be there first.
  if (o.cuda) net->to(device);
  zero::Engine engine =
      grid ? zero::initialize(net, parsed, *grid) : zero::initialize(net, parsed, world);
  // A micro-batch's loss outside a pipeline of several stages.
  auto micro_loss = [&](const at::Tensor& tokens, const at::Tensor& targets) {
    return o.pipeline ? gpt::pipeline_loss(stages->forward(tokens), targets)
                      : model->loss(tokens, targets);
  };

  const zero::Config& config = engine.config();
#if TORCH_VERSION_MAJOR < 2
  ZERO_CHECK(!config.fp16.enabled || o.cuda, zero::UsageError,
             "fp16 on the CPU: the CPU kernels of LibTorch ", TORCH_VERSION,
             " have no fp16 matmul; train in bf16 on the CPU (\"bf16\": {\"enabled\": true}) or "
             "run with --device cuda");
#endif
  const int rank = engine.rank();
  // Samples go by data rank: the tensor ranks of one data rank train on the same ones.
  const int data_rank = grid ? grid->data_rank() : rank;
  const int data_size = engine.data_parallel_size();
  const int64_t micro = config.train_micro_batch_size_per_gpu;
  const int64_t accumulation = config.gradient_accumulation_steps;
  const int64_t print_every = std::max<int64_t>(1, config.steps_per_print);
  const int64_t steps =
      o.steps > 0 ? o.steps
                  : (config.scheduler.total_num_steps > 0 ? config.scheduler.total_num_steps : 300);
  if (rank == 0) {
    std::cout << "gpt_train: " << gpt::count_parameters(*net) << " parameters"
              << (o.pipeline && grid->pipeline_size() > 1  ? " on pipeline stage 0"
                  : parsed.config.tensor_parallel_size > 1 ? " per tensor rank"
                                                           : "")
              << " (" << o.model.n_layer << " layers, d_model " << o.model.d_model << ", "
              << o.model.n_head << " heads, context " << o.model.context << ", vocab "
              << o.model.vocab_size << "), " << data.num_tokens() << " tokens from " << o.data
              << "\n"
              << "gpt_train: ZeRO stage " << engine.stage() << ", " << engine.world_size()
              << " rank(s)" << (grid ? " (" + grid->to_string() + ")" : std::string())
              << ", micro batch " << micro << " x accumulation " << accumulation << " x "
              << data_size << " = " << config.train_batch_size << " sequences per step, " << steps
              << " steps" << std::endl;
  }

  // Fine-tuning: the exported weights replace the initial ones (a checkpoint in --save_dir,
  // loaded next, takes precedence: a resumed run continues from its own state).
  if (!o.load_weights.empty()) {
    zero::load_state_dict(*net, o.load_weights);
    if (rank == 0) std::cout << "gpt_train: weights from " << o.load_weights << std::endl;
  }

  // The data order is a function of the step, so the step is all the data loader needs ("steps");
  // "epochs" reads its sampler, whose position the checkpoints carry.
  std::optional<zero::DistributedSampler> sampler;
  if (o.data_order == "epochs")
    sampler.emplace(data.num_windows(), engine, zero::DistributedSampler::Options{o.seed, true});
  auto next_batch = [&](int64_t step, int64_t m) {
    return sampler ? data.rows(data.window_offsets(sampler->next()))
                   : data.batch(step, m, data_rank, data_size, micro, accumulation);
  };
  int64_t first_step = 0;
  if (engine.resumed()) {  // zerorun restarted the job: initialize loaded checkpoint.save_dir
    first_step = engine.global_steps();
    if (rank == 0)
      std::cout << "gpt_train: resumed from " << engine.resumed()->path << " at step " << first_step
                << std::endl;
  } else if (!o.save_dir.empty())
    if (auto loaded = engine.load_checkpoint(o.save_dir)) {
      first_step = loaded->client_state.value("next_step", int64_t{0});
      if (rank == 0)
        std::cout << "gpt_train: resumed from " << loaded->path << " at step " << first_step
                  << std::endl;
    }
  auto save = [&](int64_t next_step) {
    if (!o.save_dir.empty()) engine.save_checkpoint(o.save_dir, "", {{"next_step", next_step}});
  };

  // The engine prints the progress line every steps_per_print steps (loss, lr, samples/s, ...);
  // tokens and flops per sample let it add tokens/s and achieved TFLOPS, and the program adds
  // its own field (epochs of the text seen).
  engine.set_tokens_per_sample(o.model.context);
  engine.set_flops_per_sample(train_flops_per_sample(o.model));
  auto after_first_step = std::chrono::steady_clock::now();
  zero::CpuAllocations allocations_after_second{};
  double first_loss = 0, last_loss = 0;
  std::vector<double> losses;  // each step's mean over its micro batches (--json_summary)
  for (int64_t step = first_step; step < steps; ++step) {
    if ((step + 1) % print_every == 0) {  // the epochs of text seen after this step
      char epoch[32];
      std::snprintf(epoch, sizeof epoch, "%.3f",
                    static_cast<double>((step + 1) * config.train_batch_size * o.model.context) /
                        static_cast<double>(data.num_tokens()));
      engine.set_progress_field("epoch", epoch);
    }
    if (o.pipeline && grid->pipeline_size() > 1) {
      // The pipeline's schedule runs the step's micro-batches; the first and last stages load.
      int64_t m = 0;
      last_loss = engine.train_batch([&] {
        const gpt::Batch batch = next_batch(step, m++);
        return zero::pipe::MicroBatch{batch.tokens.to(device), batch.targets.to(device)};
      });
    } else {
      double loss_sum = 0;
      for (int64_t m = 0; m < accumulation; ++m) {
        const gpt::Batch batch = next_batch(step, m);
        const at::Tensor loss = micro_loss(batch.tokens.to(device), batch.targets.to(device));
        engine.backward(loss);
        engine.step();
        loss_sum += loss.item<double>();
      }
      last_loss = loss_sum / static_cast<double>(accumulation);
    }
    losses.push_back(last_loss);
    if (step == first_step) {
      first_loss = last_loss;
      after_first_step = std::chrono::steady_clock::now();
    }
    if (step == first_step + 1) allocations_after_second = zero::cpu_allocations();
    if (o.save_every > 0 && (step + 1) % o.save_every == 0 && step + 1 < steps) save(step + 1);
  }
  if (first_step < steps) save(steps);
  if (rank == 0)
    std::cout << "gpt_train: done, " << engine.global_steps() << " optimizer steps" << std::endl;
  if (o.sample > 0) {
    // Every rank generates (stage 3 gathers in each forward); all draw the same characters.
    const std::string text_start = text.substr(0, std::min<size_t>(32, o.model.context / 2 + 1));
    const std::vector<int64_t> prompt = tokenizer.encode(text_start);
    const std::vector<int64_t> out = gpt::generate(model, prompt, o.sample, o.temperature, o.seed);
    if (rank == 0)
      std::cout << "gpt_train: sample (temperature " << o.temperature << ", seed " << o.seed
                << "):\n"
                << tokenizer.decode(out) << std::endl;
  }
  if (o.json_summary && rank != 0) {
    std::string source;
    const int64_t peak = peak_memory_bytes(device, &source);
    std::cout << "{\"rank\": " << rank << ", \"parameters\": " << gpt::count_parameters(*net)
              << ", \"peak_memory_bytes\": " << peak << ", \"memory_source\": \"" << source << "\"}"
              << std::endl;
  }
  if (o.json_summary && rank == 0) {
    if (o.cuda) torch::cuda::synchronize(device.index());
    // Mean wall time of the steps after the first (which records stage 3's order, warms up).
    const double later_ms = std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - after_first_step)
                                .count();
    const double ms_per_step = steps > 1 ? later_ms / static_cast<double>(steps - 1) : 0.0;
    const zero::CpuAllocations allocations = zero::cpu_allocations();
    const double steady_steps = static_cast<double>(steps - first_step - 2);
    const double allocations_per_step =
        steady_steps > 0
            ? static_cast<double>(allocations.count - allocations_after_second.count) / steady_steps
            : 0.0;
    const double allocated_bytes_per_step =
        steady_steps > 0
            ? static_cast<double>(allocations.bytes - allocations_after_second.bytes) / steady_steps
            : 0.0;
    std::string source;
    const int64_t peak = peak_memory_bytes(device, &source);
    std::string loss_list;
    for (const double l : losses) {
      char one[32];
      std::snprintf(one, sizeof one, "%s%.9g", loss_list.empty() ? "" : ", ",
                    l);  // a float, exactly
      loss_list += one;
    }
    char line[640];
    std::snprintf(
        line, sizeof line,
        "{\"first_loss\": %.6f, \"final_loss\": %.6f, \"ms_per_step\": %.3f, "
        "\"peak_memory_bytes\": %lld, "
        "\"memory_source\": \"%s\", \"steps\": %lld, \"stage\": %d, \"world_size\": %d, "
        "\"device\": \"%s\", \"tensor_parallel\": %d, "
        "\"checkpoint_peak_bytes\": %lld, \"parameters\": %lld, \"vector_parameters\": %lld, "
        "\"cpu_allocations_per_step\": %.1f, \"cpu_allocated_bytes_per_step\": %.0f, "
        "\"losses\": [",
        first_loss, last_loss, ms_per_step, static_cast<long long>(peak), source.c_str(),
        static_cast<long long>(steps), engine.stage(), engine.world_size(), device.str().c_str(),
        engine.tensor_parallel_size(),
        static_cast<long long>(engine.activation_checkpointing()->stats().peak_live_bytes),
        static_cast<long long>(gpt::count_parameters(*net)),
        static_cast<long long>(gpt::count_parameters(*net, /*vectors_only=*/true)),
        allocations_per_step, allocated_bytes_per_step);
    std::cout << line << loss_list << "]}" << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return train(argc, argv);
  } catch (const zero::UsageError& e) {
    std::cerr << "gpt_train: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {  // the model's checks (TORCH_CHECK): the message, no backtrace
    std::cerr << "gpt_train: error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "gpt_train: error: " << e.what() << "\n";
    return 1;
  }
}

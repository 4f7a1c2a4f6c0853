// Our verdict on every real-world ds_config in tests/data/ds_configs: accepted with the key
// resolved values at world size 8, or rejected naming the right key and line.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <zero/config/config.h>

namespace {

struct Verdict {
  const char* file;
  std::map<std::string, std::string> overrides;  // supplies "auto" values, as a trainer would
  bool accepted;
  // accepted: resolved values
  int stage = 0;
  const char* precision = "";
  const char* offload_optimizer = "none";
  const char* offload_param = "none";
  const char* optimizer = "";
  double lr = 0;
  int64_t train_batch = 0, micro_batch = 0, accumulation = 0;
  // rejected: one of the problems names this path on this line; or (accepted) a warning does
  const char* path = "";
  int line = 0;
  int world_size = 8;
};

Verdict ok(const char* file, std::map<std::string, std::string> overrides, int stage,
           const char* precision, const char* off_opt, const char* off_param, const char* optimizer,
           double lr, int64_t tb, int64_t mb, int64_t gas, const char* warning_path = "",
           int warning_line = 0, int world_size = 8) {
  Verdict v{file, std::move(overrides), true};
  v.stage = stage, v.precision = precision, v.offload_optimizer = off_opt,
  v.offload_param = off_param;
  v.optimizer = optimizer, v.lr = lr, v.train_batch = tb, v.micro_batch = mb, v.accumulation = gas;
  v.path = warning_path, v.line = warning_line, v.world_size = world_size;
  return v;
}
Verdict bad(const char* file, std::map<std::string, std::string> overrides, const char* path,
            int line) {
  Verdict v{file, std::move(overrides), false};
  v.path = path, v.line = line;
  return v;
}

const std::map<std::string, std::string> kMicro4 = {{"train_micro_batch_size_per_gpu", "4"}};
const std::map<std::string, std::string> kMicro4Steps = {
    {"train_micro_batch_size_per_gpu", "4"}, {"scheduler.params.total_num_steps", "1000"}};
const char* const kMicro = "train_micro_batch_size_per_gpu";
const char* const kSteps = "scheduler.params.total_num_steps";

// Every file appears with no overrides (its verdict as written); files whose batch sizes are all
// "auto" appear again with the values a trainer would supply.
const std::vector<Verdict> kVerdicts = {
    bad("01_hf_transformers_zero2.json", {}, kMicro, 52),
    ok("01_hf_transformers_zero2.json",
       {{kMicro, "4"}, {"bf16.enabled", "true"}, {"optimizer.params.lr", "2e-5"}}, 2, "bf16", "cpu",
       "none", "AdamW", 2e-5, 32, 4, 1),
    bad("02_hf_transformers_zero3.json", {}, "train_batch_size", 0),
    ok("02_hf_transformers_zero3.json", {{"train_batch_size", "64"}}, 3, "fp16", "cpu", "cpu",
       "AdamW", 3e-5, 64, 8, 1, "zero_optimization.stage3_gather_fp16_weights_on_model_save", 29),
    bad("03_hf_transformers_zero2_BFLOAT16.json", {}, kMicro, 43),
    ok("03_hf_transformers_zero2_BFLOAT16.json",
       {{kMicro, "2"}, {"gradient_accumulation_steps", "4"}, {"bfloat16.enabled", "true"}}, 2,
       "bf16", "cpu", "none", "AdamW", 1e-3, 64, 2, 4, "bfloat16", 2),
    bad("04_accelerate_zero_stage1.json", {}, kSteps, 25),
    bad("04_accelerate_zero_stage1.json", {}, kMicro, 41),
    ok("04_accelerate_zero_stage1.json", kMicro4Steps, 1, "fp16", "none", "none", "AdamW", 1e-3, 32,
       4, 1),
    ok("06_accelerate_zero3_model_only.json", {}, 3, "fp32", "none", "cpu", "", 0, 8, 1, 1),
    bad("07_accelerate_sp_alst.json", {}, kMicro, 10),
    ok("07_accelerate_sp_alst.json", {{kMicro, "2"}}, 3, "bf16", "none", "none", "", 0, 16, 2, 1,
       "seq_parallel_communication_data_type", 11),
    bad("08_llamafactory_z0.json", {}, kMicro, 3),
    ok("08_llamafactory_z0.json", kMicro4, 0, "fp32", "none", "none", "", 0, 32, 4, 1),
    bad("10_llamafactory_z3_fp8_DUPKEY.json", {}, "steps_per_print", 38),
    bad("11_llamafactory_z3_offload_COMMENTS.json", {}, kMicro, 3),
    ok("11_llamafactory_z3_offload_COMMENTS.json", {{kMicro, "1"}, {"fp16.enabled", "true"}}, 3,
       "fp16", "cpu", "cpu", "", 0, 8, 1, 1, "monitor_config", 53),
    bad("13_llamafactory_z3_quant_grads.json", {}, kMicro, 3),
    ok("13_llamafactory_z3_quant_grads.json", kMicro4, 3, "bf16", "none", "none", "", 0, 32, 4, 1,
       "zero_optimization.stage3_module_granularity_threshold", 20),
    bad("14_axolotl_zero1_torch_compile.json", {}, kMicro, 25),
    ok("14_axolotl_zero1_torch_compile.json", kMicro4, 1, "fp32", "none", "none", "", 0, 32, 4, 1,
       "compile", 18),
    bad("16_axolotl_ds_config_TRAILING_COMMA.json", {}, kMicro, 54),
    ok("16_axolotl_ds_config_TRAILING_COMMA.json", kMicro4, 3, "fp32", "cpu", "cpu", "AdamW", 1e-3,
       32, 4, 1),
    bad("17_axolotl_ds_config_onecycle.json", {}, kMicro, 55),
    ok("17_axolotl_ds_config_onecycle.json", kMicro4, 3, "fp32", "cpu", "cpu", "AdamW", 1e-3, 32, 4,
       1),
    bad("18_axolotl_zero3_MISSING_BRACE.json", {}, "(root)", 1),
    bad("19_fastchat_s2_MISNESTED.json", {}, "optimizer.zero_optimization", 16),
    bad("21_alpaca_default_offload_opt_param.json", {}, kSteps, 17),
    ok("21_alpaca_default_offload_opt_param.json", kMicro4Steps, 3, "fp32", "cpu", "cpu", "AdamW",
       1e-3, 32, 4, 1),
    bad("23_lmflow_zero3_checkpoint.json", {}, kMicro, 43),
    ok("23_lmflow_zero3_checkpoint.json", kMicro4, 3, "fp32", "cpu", "cpu", "", 0, 32, 4, 1),
    bad("24_bigscience_ds_zero2_cpu_offload.json", {}, kSteps, 27),
    ok("24_bigscience_ds_zero2_cpu_offload.json", kMicro4Steps, 2, "fp16", "cpu", "none", "AdamW",
       1e-3, 32, 4, 1, "zero_optimization.cpu_offload", 39),
    ok("25_deepspeed_gpt2_zero2_offload.json", {}, 2, "fp16", "cpu", "none", "", 0, 8, 1, 1,
       "zero_optimization.cpu_offload", 10),
    bad("27_deepspeed_bingbert_ZERO_TRUE.json", {}, "optimizer.params.max_grad_norm", 17),
    ok("28_deepspeed_test_pipe_ZERO_FALSE.json", {}, 0, "fp32", "none", "none", "Adam", 1e-3, 1024,
       16, 8, "pipeline.seeded", 31),
    bad("29_deepspeed_bingbert_eigenvalue_quantize.json", {}, "quantize_training", 31),
    ok("31_deepspeed_deepcompile_z3.json", {}, 3, "bf16", "none", "none", "Adam", 1e-3, 8, 1, 1,
       "compile", 30),
    ok("32_deepspeed_hybrid_engine_z0_offload_param.json", {}, 0, "fp16", "none", "cpu", "", 0, 32,
       2, 2, "zero_optimization.offload_param", 7),
    bad("34_dse_zerooneadam_nccl.json", {}, "optimizer.type", 7),
    bad("35_dse_onebitadam_squad.json", {}, "optimizer.type", 6),
    bad("36_dse_lamb_sparse_attention.json", {}, "optimizer.type", 7),
    bad("37_dse_progressive_layer_drop.json", {}, "progressive_layer_drop", 21),
    bad("39_dse_zero_infinity_SWAP_TENSOR.json", {},
        "zero_optimization.stage3_param_persitance_threshold", 9),
    bad("40_dse_megatron_ZERO_TRUE.json", {}, "optimizer.params.max_grad_norm", 10),
    bad("42_dse_resnet_SGD.json", {}, "optimizer.params.betas", 8),
    bad("44_dse_annotated_JSONC_COMMENTS.json", {}, "train_batch_size", 128),
    // one sample per step fits one rank: stage 3 with parameters on NVMe, as the tutorial means
    ok("44_dse_annotated_JSONC_COMMENTS.json", {}, 3, "fp32", "none", "nvme", "", 0, 1, 1, 1, "", 0,
       1),
    ok("45_dse_pipeline_TRAILING_COMMA.json", {}, 0, "fp32", "none", "none", "Adam", 1e-3, 256, 16,
       2),
    ok("47_dse_qanet_onecycle_TABS.json", {}, 0, "fp32", "none", "none", "Adam", 1e-3, 512, 64, 1,
       "train_step_batch_size", 3),
    bad("48_dse_compression_bert_fp16.json", {}, "compression_training", 14),
    bad("48_dse_compression_bert_fp16.json", {}, "train_batch_size", 2),
    bad("49_dse_random_ltd.json", {}, "data_efficiency", 23),
    bad("51_dse_zenflow.json", {}, "zero_optimization.zenflow", 10),
    bad("52_megatronds_universal_ckpt.json", {}, "train_batch_size", 2),
    ok("52_megatronds_universal_ckpt.json", {}, 1, "bf16", "none", "none", "", 0, 16, 16, 1, "", 0,
       1),
    bad("54_megatronds_moe_TEMPLATE.json", {}, "train_batch_size", 2),
    bad("56_internvl_adam_zero1_AMP.json", {}, "amp", 10),
    bad("58_baichuan2_ds_config.json", {}, kMicro, 3),
    ok("58_baichuan2_ds_config.json", {{kMicro, "2"}}, 3, "fp32", "none", "none", "", 0, 16, 2, 1),
};

// The real configs are in the repository (tests/data/ds_configs, each with its source in
// PROVENANCE.tsv); ZERO_DS_CONFIGS_DIR in the environment points at another set.
std::filesystem::path configs_dir() {
  if (const char* env = std::getenv("ZERO_DS_CONFIGS_DIR")) return env;
  return ZERO_DS_CONFIGS_DIR;
}

// PROVENANCE.tsv: file, repository, commit, path, licence, notes.
std::map<std::string, std::vector<std::string>> provenance(const std::filesystem::path& dir) {
  std::ifstream in(dir / "PROVENANCE.tsv");
  std::map<std::string, std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream fields(line);
    for (std::string cell; std::getline(fields, cell, '\t');) cells.push_back(cell);
    if (!cells.empty()) rows[cells[0]] = cells;
  }
  return rows;
}

bool names(const std::vector<zero::ConfigDiagnostic>& diagnostics, const std::string& path,
           int line) {
  return std::any_of(diagnostics.begin(), diagnostics.end(), [&](const zero::ConfigDiagnostic& d) {
    return d.path == path && d.line == line;
  });
}

}  // namespace

TEST_CASE("every file in tests/data/ds_configs has a verdict, and every verdict a file") {
  std::filesystem::path dir = configs_dir();
  INFO("ds_configs directory: '" << dir.string()
                                 << "' (set ZERO_DS_CONFIGS_DIR when it is elsewhere)");
  REQUIRE(!dir.empty());
  REQUIRE(std::filesystem::is_directory(dir));
  std::set<std::string> files, judged, unconditioned;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.insert(e.path().filename().string());
  }
  for (const Verdict& v : kVerdicts) {
    judged.insert(v.file);
    if (v.overrides.empty()) unconditioned.insert(v.file);
  }
  CHECK(files.size() >= 40);
  CHECK(files == judged);
  CHECK(files == unconditioned);  // each file is also judged as written
}

TEST_CASE("every real config names its repository, commit, path and licence") {
  std::filesystem::path dir = configs_dir();
  const auto rows = provenance(dir);
  std::set<std::string> files, listed;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.insert(e.path().filename().string());
  for (const auto& [file, cells] : rows) {
    listed.insert(file);
    INFO(file);
    REQUIRE(cells.size() >= 5);
    CHECK(cells[1].find('/') != std::string::npos);  // owner/name
    CHECK(cells[2].size() == 40);                    // a full commit id
    CHECK(!cells[3].empty());
    CHECK(!cells[4].empty());
  }
  CHECK(files == listed);
}

TEST_CASE("verdicts on the real-world ds_configs") {
  std::filesystem::path dir = configs_dir();
  REQUIRE(!dir.empty());
  for (size_t row = 0; row < kVerdicts.size(); ++row) {
    const Verdict& v = kVerdicts[row];
    zero::ConfigOptions options;
    options.world_size = v.world_size;
    options.overrides = v.overrides;
    std::string overrides;
    for (const auto& [k, val] : v.overrides) overrides += " --set " + k + "=" + val;
    SECTION("row " + std::to_string(row) + ": " + v.file + overrides + " (world size " +
            std::to_string(v.world_size) + ")") {
      std::string file = (dir / v.file).string();
      if (!v.accepted) {
        try {
          zero::parse_config_file(file, options);
          FAIL("accepted, but should be rejected naming " << v.path << " on line " << v.line);
        } catch (const zero::ConfigFileError& e) {
          INFO(e.what());
          CHECK(names(e.diagnostics(), v.path, v.line));
          for (const auto& d : e.diagnostics()) CHECK(d.file == file);
        }
        continue;
      }
      zero::ParsedConfig parsed;
      try {
        parsed = zero::parse_config_file(file, options);
      } catch (const zero::ConfigFileError& e) {
        FAIL("rejected, but should be accepted:\n" << e.what());
      }
      const zero::Config& c = parsed.config;
      CHECK(c.zero_optimization.stage == v.stage);
      CHECK(c.precision() == v.precision);
      CHECK(c.zero_optimization.offload_optimizer.device == v.offload_optimizer);
      CHECK(c.zero_optimization.offload_param.device == v.offload_param);
      CHECK(c.optimizer.type == v.optimizer);
      if (*v.optimizer) CHECK(c.optimizer.lr == Approx(v.lr).epsilon(1e-12));
      CHECK(c.train_batch_size == v.train_batch);
      CHECK(c.train_micro_batch_size_per_gpu == v.micro_batch);
      CHECK(c.gradient_accumulation_steps == v.accumulation);
      if (*v.path) CHECK(names(parsed.warnings, v.path, v.line));
    }
  }
}

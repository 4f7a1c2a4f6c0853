// Unit tests of the ds_config parser, the rest of its policy (docs/config.md): contradictions,
// settings without effect, defaults, output, the file API, and the keys DeepSpeed honours that
// we honour, refuse or report.
#include "parser_test_util.h"

TEST_CASE("contradictions are errors") {
  auto d = errors_of(std::string("{") + kBatch +
                     R"(, "fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  CHECK(mentions(find(d, "bf16.enabled"), "both enabled"));
  d = errors_of(std::string("{") + kBatch +
                R"(, "zero_optimization": {"reduce_bucket_size": -1}})");
  CHECK(mentions(find(d, "zero_optimization.reduce_bucket_size"), "cannot be negative"));
  d = errors_of(std::string("{") + kBatch + R"(, "communication_data_type": "bfp16"})");
  auto e = find(d, "communication_data_type");
  CHECK(mentions(e, "valid values: \"fp32\", \"fp16\", \"bf16\""));
  CHECK(mentions(e, "did you mean"));
  d = errors_of(std::string("{") + kBatch +
                R"(, "bf16": {"enabled": true, "loss_scale": 0, "hysteresis": 2}})");
  CHECK(d.size() == 2);
  CHECK(mentions(find(d, "bf16.loss_scale"), "fp16-only"));
  d = errors_of(std::string("{") + kBatch +
                R"(, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}})");
  CHECK(mentions(find(d, "zero_optimization.offload_optimizer.device"),
                 "\"none\", \"cpu\", \"nvme\""));
  d = errors_of(
      std::string("{") + kBatch +
      R"(, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})");
  CHECK(mentions(find(d, "zero_optimization.offload_optimizer.ratio"), "stage 3"));
  Config c = parse(std::string("{") + kBatch + R"(, "communication_data_type": "BF16"})").config;
  CHECK(c.communication_data_type == "bf16");
}

TEST_CASE("settings without effect at the chosen stage are warnings") {
  auto p = parse(std::string("{") + kBatch + R"(, "zero_optimization": {"stage": 2,
      "offload_param": {"device": "cpu"}, "stage3_max_live_parameters": 100, "max_reuse_distance": 5}})");
  CHECK(p.warnings.size() == 3);
  CHECK(mentions(find(p.warnings, "zero_optimization.offload_param"), "no effect at stage 2"));
  CHECK(mentions(find(p.warnings, "zero_optimization.stage3_max_live_parameters"),
                 "no effect at stage 2"));
  CHECK(find(p.warnings, "zero_optimization.max_reuse_distance").path ==
        "zero_optimization.max_reuse_distance");
  p = parse(std::string("{") + kBatch +
            R"(, "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})");
  CHECK(mentions(find(p.warnings, "zero_optimization.offload_optimizer"), "no effect at stage 0"));
  CHECK(parse(std::string("{") + kBatch +
              R"(, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
      "stage3_max_live_parameters": 100}})")
            .warnings.empty());
}

TEST_CASE("defaults are DeepSpeed's code defaults") {
  Config c = parse(std::string("{") + kBatch + "}").config;
  const auto& z = c.zero_optimization;
  CHECK(z.stage == 0);
  CHECK(!z.overlap_comm);
  CHECK(z.reduce_bucket_size == 500000000);
  CHECK(z.allgather_bucket_size == 500000000);
  CHECK(z.sub_group_size == 1000000000);
  CHECK(z.stage3_prefetch_bucket_size == 50000000);
  CHECK(z.stage3_param_persistence_threshold == 100000);
  CHECK(z.stage3_max_live_parameters == 1000000000);
  CHECK(z.offload_optimizer.device == "none");
  CHECK(z.offload_optimizer.buffer_count == 4);
  CHECK(z.offload_param.buffer_count == 5);
  CHECK(z.offload_param.buffer_size == 100000000);
  CHECK(c.fp16.loss_scale == 0.0);
  CHECK(c.fp16.initial_scale_power == 16);
  CHECK(c.fp16.loss_scale_window == 1000);
  CHECK(c.fp16.hysteresis == 2);
  CHECK(c.fp16.min_loss_scale == 1.0);
  CHECK(c.bf16.check_grad_overflow);  // our default; DeepSpeed's code has false
  CHECK(c.steps_per_print == 10);
  CHECK(c.gradient_clipping == 0.0);
  CHECK(c.gradient_predivide_factor == 1.0);
  CHECK(c.communication_data_type.empty());
  CHECK(c.optimizer.type.empty());
  CHECK(c.scheduler.type.empty());
  CHECK(c.checkpoint.tag_validation == "Warn");
  CHECK(c.precision() == "fp32");
  CHECK(parse(std::string("{") + kBatch + R"(, "zero_optimization": {"stage": 3}})")
            .config.zero_optimization.overlap_comm);
}

TEST_CASE("to_json_string prints every field and reads back into the same config") {
  std::string text = R"({"train_batch_size": 32, "gradient_accumulation_steps": 2,
    "fp16": {"enabled": true, "initial_scale_power": 12, "consecutive_hysteresis": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
    "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-5, "cycle_max_lr": 1e-3}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": 0.25},
      "offload_param": {"device": "cpu", "nvme_path": "/tmp/\u00e9"}},
    "comms_logger": {"enabled": true, "prof_ops": ["all_reduce"]}, "data_types": {"grad_accum_dtype": "fp32"}})";
  Config c = parse(text, ws(4)).config;
  std::string printed = zero::to_json_string(c);
  auto j = nlohmann::json::parse(printed);
  CHECK(j["zero_optimization"]["offload_optimizer"]["ratio"] == 0.25);
  CHECK(j["zero_optimization"]["stage3_max_live_parameters"] == 1000000000);
  CHECK(j["scheduler"]["params"]["cycle_second_step_size"].is_null());
  CHECK(j["fp16"].size() == 9);
  CHECK(j["train_micro_batch_size_per_gpu"] == 4);
  Config again = parse(printed, ws(4)).config;
  CHECK(zero::to_json_string(again) == printed);
  Config plain = parse(std::string("{") + kBatch + "}").config;
  CHECK(zero::to_json_string(parse(zero::to_json_string(plain)).config) ==
        zero::to_json_string(plain));
}

TEST_CASE("parse_config_json and parse_config_file") {
  nlohmann::json j = {{"train_micro_batch_size_per_gpu", 2}, {"zero_optimization", {{"stage", 2}}}};
  auto p = zero::parse_config_json(j, ws(2));
  CHECK(p.config.train_batch_size == 4);
  try {
    zero::parse_config_json({{"zero_optimization", {{"stagee", 2}}}}, ws(2));
    FAIL("accepted");
  } catch (const ConfigFileError& e) {
    CHECK(e.diagnostics().size() == 2);
    CHECK(e.diagnostics()[0].line == 0);
    CHECK(std::string(e.what()).find("<json>:0: zero_optimization.stagee: unknown key") !=
          std::string::npos);
  }
  auto dir =
      std::filesystem::temp_directory_path() / ("zero_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string file = (dir / "ds.json").string();
  std::ofstream(file)
      << "{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": true, \"loss_scal\": 1}\n}\n";
  try {
    zero::parse_config_file(file);
    FAIL("accepted");
  } catch (const ConfigFileError& e) {
    CHECK(std::string(e.what()) ==
          file + ":3: fp16.loss_scal: unknown key 'loss_scal' in fp16; did you mean 'loss_scale'?");
  }
  CHECK_THROWS_AS(zero::parse_config_file((dir / "missing.json").string()), zero::ConfigError);
  CHECK_THROWS_AS(zero::parse_config_file(dir.string()), zero::ConfigError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("DeepSpeed's keys that change loading and stepping are honoured or refused") {
  auto z = [](const std::string& keys) {
    return std::string("{") + kBatch + R"(, "zero_optimization": {)" + keys + "}}";
  };
  // Honoured both ways (the engine tests check what each does); absent, DeepSpeed's true.
  for (bool value : {true, false}) {
    const std::string v = value ? "true" : "false";
    auto bf16 = parse(z(R"("stage": 2, "load_from_fp32_weights": )" + v));
    CHECK(bf16.config.zero_optimization.load_from_fp32_weights == value);
    auto unused = parse(z(R"("stage": 3, "ignore_unused_parameters": )" + v));
    CHECK(unused.config.zero_optimization.ignore_unused_parameters == value);
    CHECK(unused.warnings.empty());
  }
  CHECK(parse(z(R"("stage": 1)")).config.zero_optimization.load_from_fp32_weights);
  CHECK(parse(z(R"("stage": 1)")).config.zero_optimization.ignore_unused_parameters);
  // Rebuilding fp32 masters from 16-bit weights means nothing in fp32: said once.
  auto fp32 = parse(z(R"("stage": 2, "load_from_fp32_weights": false)"));
  REQUIRE(fp32.warnings.size() == 1);
  CHECK(fp32.warnings[0].path == "zero_optimization.load_from_fp32_weights");
  CHECK(mentions(fp32.warnings[0], "no effect in fp32"));
  auto bf16 = parse(
      std::string("{") + kBatch +
      R"(, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "load_from_fp32_weights": false}})");
  CHECK(bf16.warnings.empty());
  CHECK(mentions(find(errors_of(z(R"("legacy_stage1": true)")), "zero_optimization.legacy_stage1"),
                 "0.5.9"));
  // The 16-bit consolidation on save: honoured off at stage 3 under any of its names (then
  // save_16bit_model saves nothing, as DeepSpeed); absent, ours is on; below stage 3 only the
  // stage warning.
  CHECK(
      parse(z(R"("stage": 3)")).config.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  for (const char* key :
       {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save"}) {
    INFO(key);
    auto off = parse(z(std::string("\"stage\": 3, \"") + key + "\": false"));
    CHECK_FALSE(off.config.zero_optimization.stage3_gather_16bit_weights_on_model_save);
    auto p = parse(z(std::string("\"stage\": 2, \"") + key + "\": false"));
    CHECK(std::any_of(p.warnings.begin(), p.warnings.end(), [&](const ConfigDiagnostic& w) {
      return w.path == std::string("zero_optimization.") + key &&
             mentions(w, "no effect at stage 2");
    }));
  }
}

TEST_CASE("keys without effect here are reported once, and only at a value other than ours") {
  auto p = parse(std::string("{") + kBatch + R"(, "zero_optimization": {"stage": 3,
      "contiguous_gradients": false, "reduce_scatter": true, "allgather_sequential": true,
      "stage3_model_persistence_threshold": 0, "offload_optimizer": {"cpuadam_cores_perc": 0.5}},
      "bf16": {"immediate_grad_update": true}, "aio": {"use_gds": true},
      "zero_allow_untested_optimizer": true, "dataloader_drop_last": false,
      "optimizer": {"type": "Adam", "legacy_fusion": true, "params": {"torch_adam": true}}})");
  for (const char* path :
       {"zero_optimization.contiguous_gradients", "zero_optimization.allgather_sequential",
        "zero_optimization.stage3_model_persistence_threshold",
        "zero_optimization.offload_optimizer.cpuadam_cores_perc", "bf16.immediate_grad_update",
        "aio.use_gds", "zero_allow_untested_optimizer", "optimizer.legacy_fusion",
        "optimizer.params.torch_adam"}) {
    INFO(path);
    CHECK(mentions(find(p.warnings, path), "no effect: "));
  }
  CHECK(p.warnings.size() == 9);  // nothing for reduce_scatter true or dataloader_drop_last false
  CHECK(mentions(find(p.warnings, "aio.use_gds"), "io_uring"));
  // Below stage 3 a stage 3 knob gets the stage warning alone.
  p = parse(std::string("{") + kBatch +
            R"(, "zero_optimization": {"stage": 1, "stage3_allgather_sequential": true}})");
  CHECK(p.warnings.size() == 1);
  CHECK(mentions(p.warnings[0], "no effect at stage 1"));
  // --strict turns them into errors.
  CHECK(!errors_of(std::string("{") + kBatch + R"(, "dump_state": true})", ws(1, true)).empty());
}

TEST_CASE("a monitor section without a client must be an object") {
  auto d = errors_of(std::string("{") + kBatch + R"(, "wandb": true})");
  CHECK(mentions(find(d, "wandb"), "expected an object"));
  CHECK(parse(std::string("{") + kBatch + R"(, "comet": {"enabled": false}})").warnings.empty());
}

TEST_CASE(
    "tensor_parallel.autotp_size: batch sizes per data-parallel rank, a divisor of the world") {
  const std::string tp2 = R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
                              "tensor_parallel": {"autotp_size": 2}})";
  const Config c = parse(tp2, ws(4)).config;
  CHECK(c.tensor_parallel_size == 2);
  CHECK(c.data_parallel_size == 2);
  CHECK(c.world_size == 4);
  CHECK(c.train_batch_size == 2 * 3 * 2);  // DeepSpeed: micro x accumulation x data ranks
  for (const char* none : {"0", "1"}) {
    const Config d =
        parse(std::string(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": )") + none +
                  "}}",
              ws(4))
            .config;
    CHECK(d.tensor_parallel_size == 1);
    CHECK(d.data_parallel_size == 4);
  }
  CHECK(mentions(find(errors_of(tp2, ws(3)), "tensor_parallel.autotp_size"),
                 "does not divide the world size 3"));
  auto d = errors_of(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                         "gradient_accumulation_steps": 3, "tensor_parallel": {"autotp_size": 2}})",
                     ws(4));
  CHECK(mentions(find(d, "train_batch_size"),
                 "* data-parallel size (2 = world_size 4 / tensor_parallel.autotp_size 2) = 12"));
  // Written out, read back: the same degree.
  CHECK(parse(zero::to_json_string(c), ws(4)).config.tensor_parallel_size == 2);
}

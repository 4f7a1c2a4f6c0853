// Unit tests of the ds_config parser, one block per line of its policy (docs/config.md): syntax,
// unknown keys, unimplemented features, deprecated forms, aliases, "auto", the batch rule (the
// rest of the policy: config_values_test.cpp).
#include "parser_test_util.h"

TEST_CASE("syntax: comments, trailing commas, CRLF, tabs and a BOM are accepted") {
  std::string text =
      "\xEF\xBB\xBF{\r\n\t// a line comment\r\n\t\"train_batch_size\": 8, /* block\r\n comment "
      "*/\r\n"
      "\t\"zero_optimization\": {\"stage\": 2,},\r\n\t\"optimizer\": {\"type\": \"Adam\", "
      "\"params\": {\"betas\": [0.8, 0.9,],}},\r\n}\r\n";
  Config c = parse(text).config;
  CHECK(c.zero_optimization.stage == 2);
  CHECK(c.optimizer.betas[0] == 0.8);
  CHECK(c.train_batch_size == 8);
}

TEST_CASE("syntax: anything else that is not JSON is an error with line and column") {
  SECTION("missing comma") {
    auto d = errors_of("{\n  \"train_batch_size\": 8\n  \"fp16\": {}\n}");
    REQUIRE(d.size() == 1);
    CHECK(d[0].line == 3);
    CHECK(d[0].column == 3);
    CHECK(mentions(d[0], "missing comma"));
    CHECK(d[0].to_string().rfind("t.json:3: (root): syntax error at column 3", 0) == 0);
  }
  SECTION("unquoted value names its key") {
    auto d = errors_of("{\n \"train_batch_size\": BATCH\n}");
    CHECK(d[0].line == 2);
    CHECK(d[0].path == "train_batch_size");
    CHECK(mentions(d[0], "unquoted value 'BATCH'"));
  }
  for (const char* text : {"",
                           "   ",
                           "{",
                           "{\"a\" 1}",
                           "{\"a\": 'x'}",
                           "{\"a\": NaN}",
                           "{\"a\": 01}",
                           "{\"a\": .5}",
                           "{\"a\": 1.}",
                           "{\"a\": [1,,2]}",
                           "{,}",
                           "{\"a\": \"x\ny\"}",
                           "{\"a\": \"\\q\"}",
                           "{\"a\": 1} {}",
                           "/* open",
                           "{\"a\": \"\xff\"}",
                           "{\"a\": \"\\ud800\"}",
                           "{\"a\": 1e999}",
                           "{\"a\": tru}",
                           "{a: 1}"}) {
    INFO(text);
    auto d = errors_of(text);
    CHECK(d.size() == 1);
    CHECK(d[0].line >= 1);
    CHECK(d[0].column >= 1);
    CHECK(mentions(d[0], "syntax error"));
  }
  SECTION("deep nesting is bounded") {
    auto d = errors_of(std::string(1000, '[') + std::string(1000, ']'));
    CHECK(mentions(d[0], "nested deeper"));
  }
  SECTION("the document must be an object") {
    auto d = errors_of("[1, 2]");
    CHECK(d[0].path == "(root)");
    CHECK(mentions(d[0], "must be a JSON object"));
  }
}

TEST_CASE("syntax: duplicate keys are an error at the second occurrence") {
  auto d = errors_of("{\n \"zero_optimization\": {\n  \"stage\": 1,\n  \"stage\": 2\n }\n}");
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "zero_optimization.stage");
  CHECK(d[0].line == 4);
  CHECK(mentions(d[0], "first given on line 3"));
}

TEST_CASE("unknown keys in strictly validated sections are errors with the nearest key") {
  std::string text =
      std::string("{") + kBatch +
      ",\n \"zero_optimization\": {\"stage\": 3,\n"
      " \"stage3_param_persitence_threshold\": 10,\n \"offload_optimizer\": {\"devise\": "
      "\"cpu\"},\n"
      " \"offload_param\": {\"pin_memroy\": true}},\n \"fp16\": {\"enable\": true},\n"
      " \"bf16\": {\"enabledd\": false}}";
  auto d = errors_of(text);
  CHECK(d.size() == 5);
  auto z = find(d, "zero_optimization.stage3_param_persitence_threshold");
  CHECK(z.line == 3);
  CHECK(mentions(z, "did you mean 'stage3_param_persistence_threshold'?"));
  CHECK(mentions(find(d, "zero_optimization.offload_optimizer.devise"), "did you mean 'device'?"));
  CHECK(mentions(find(d, "zero_optimization.offload_param.pin_memroy"),
                 "did you mean 'pin_memory'?"));
  CHECK(mentions(find(d, "fp16.enable"), "did you mean 'enabled'?"));
  CHECK(find(d, "bf16.enabledd").line == 7);
}

TEST_CASE("unknown top-level keys are warnings with a suggestion; --strict makes them errors") {
  std::string text = std::string("{") + kBatch + ",\n \"steps_per_prnt\": 5}";
  auto parsed = parse(text);
  REQUIRE(parsed.warnings.size() == 1);
  CHECK(parsed.warnings[0].path == "steps_per_prnt");
  CHECK(parsed.warnings[0].line == 2);
  CHECK(mentions(parsed.warnings[0], "did you mean 'steps_per_print'?"));
  auto d = errors_of(text, ws(1, true));
  CHECK(mentions(find(d, "steps_per_prnt"), "(--strict)"));
}

TEST_CASE("a known section nested in the wrong place is an error") {
  auto d = errors_of(std::string("{") + kBatch +
                     R"(, "optimizer": {"type": "AdamW", "zero_optimization": {"stage": 2}}})");
  CHECK(mentions(find(d, "optimizer.zero_optimization"), "belongs at the top level"));
}

TEST_CASE("activation_checkpointing: DeepSpeed's keys, typed; settings without effect warn") {
  auto parsed = parse(std::string("{") + kBatch +
                      R"(, "activation_checkpointing": {"cpu_checkpointing": true, "profile": true,
      "synchronize_checkpoint_boundary": true, "partition_activations": false}})");
  CHECK(parsed.warnings.empty());
  const zero::ActivationCheckpointingConfig& a = parsed.config.activation_checkpointing;
  CHECK(a.cpu_checkpointing);
  CHECK(a.profile);
  CHECK(a.synchronize_checkpoint_boundary);
  CHECK(a.number_checkpoints == 0);
  CHECK(nlohmann::json::parse(zero::to_json_string(
            parsed.config))["activation_checkpointing"]["cpu_checkpointing"] == true);

  // DeepSpeed's GPT-2 example: partitioning has nothing to split without model parallelism.
  auto gpt2 = parse(std::string("{") + kBatch +
                    R"(, "activation_checkpointing": {"partition_activations": true,
      "contiguous_memory_optimization": true, "number_checkpoints": 12}})");
  CHECK(
      mentions(find(gpt2.warnings, "activation_checkpointing.partition_activations"), "no effect"));
  CHECK(mentions(find(gpt2.warnings, "activation_checkpointing.contiguous_memory_optimization"),
                 "ignored"));
  CHECK(gpt2.config.activation_checkpointing.number_checkpoints == 12);
  // With tensor parallelism it partitions (the engine's checkpoints keep 1/tp of each input).
  auto split = parse(std::string("{") + kBatch +
                         R"(, "tensor_parallel": {"autotp_size": 2},
      "activation_checkpointing": {"partition_activations": true}})",
                     ws(2));
  CHECK(split.config.activation_checkpointing.partition_activations);
  for (const auto& w : split.warnings)
    CHECK(w.path != "activation_checkpointing.partition_activations");
  CHECK(mentions(find(parse(std::string("{") + kBatch +
                            R"(, "activation_checkpointing": {"number_checkpoints": 4}})")
                          .warnings,
                      "activation_checkpointing.number_checkpoints"),
                 "no effect"));

  CHECK(mentions(find(errors_of(std::string("{") + kBatch +
                                R"(, "activation_checkpointing": {"cpu_checkpoint": true}})"),
                      "activation_checkpointing.cpu_checkpoint"),
                 "cpu_checkpointing"));
  CHECK(mentions(
      find(errors_of(std::string("{") + kBatch +
                     R"(, "activation_checkpointing": {"contiguous_memory_optimization": true}})"),
           "activation_checkpointing.contiguous_memory_optimization"),
      "partition_activations"));
  find(errors_of(std::string("{") + kBatch +
                 R"(, "activation_checkpointing": {"number_checkpoints": 0}})"),
       "activation_checkpointing.number_checkpoints");
}

TEST_CASE("pipeline: stages divide the data-parallel size out, the schedule is checked") {
  // 8 ranks as tp 2 x pp 2 x dp 2: the batch is per data rank.
  auto grid = parse(std::string("{") + kBatch +
                        R"(, "tensor_parallel": {"autotp_size": 2},
      "pipeline": {"stages": 2, "schedule": "ZB-H1", "seed_layers": true}})",
                    ws(8));
  CHECK(grid.config.pipeline_parallel_size == 2);
  CHECK(grid.config.data_parallel_size == 2);
  CHECK(grid.config.pipeline_schedule == "zb-h1");
  CHECK(grid.config.train_micro_batch_size_per_gpu == 4);  // 8 / 2 data ranks
  CHECK(mentions(find(grid.warnings, "pipeline.seed_layers"), "no effect"));
  CHECK(mentions(
      find(parse(std::string("{") + kBatch + R"(, "pipeline": {"virtual_stages": 2}})").warnings,
           "pipeline.virtual_stages"),
      "only the interleaved schedule"));
  // Sliced activations and gradients: on by default (DeepSpeed's), honoured with tensor
  // parallelism, "no effect" when asked for without it.
  CHECK(grid.config.pipe_partitioned);
  CHECK(grid.config.grad_partitioned);
  const auto whole = parse(std::string("{") + kBatch + R"(, "tensor_parallel": {"autotp_size": 2},
      "pipeline": {"stages": 2, "pipe_partitioned": false, "grad_partitioned": false}})",
                           ws(8));
  CHECK(!whole.config.pipe_partitioned);
  CHECK(!whole.config.grad_partitioned);
  CHECK(whole.warnings.empty());
  CHECK(mentions(
      find(parse(std::string("{") + kBatch + R"(, "pipeline": {"grad_partitioned": true}})")
               .warnings,
           "pipeline.grad_partitioned"),
      "no tensor parallelism to partition over"));
  CHECK(parse(std::string("{") + kBatch + R"(, "pipeline": {"stages": "auto"}})", ws(2))
            .config.pipeline_parallel_size == 1);
  CHECK(
      mentions(find(errors_of(std::string("{") + kBatch + R"(, "pipeline": {"stages": 3}})", ws(4)),
                    "pipeline.stages"),
               "do not divide the world size 4"));
  CHECK(!find(errors_of(std::string("{") + kBatch + R"(, "pipeline": {"schedule": "gpipe"}})"),
              "pipeline.schedule")
             .path.empty());
  CHECK(mentions(find(errors_of(R"({"train_batch_size": 6, "train_micro_batch_size_per_gpu": 2,
      "gradient_accumulation_steps": 2, "pipeline": {"stages": 2}})",
                                ws(4)),
                      "train_batch_size"),
                 "data-parallel size (2 = world_size 4 / pipeline.stages 2)"));
}

TEST_CASE("unimplemented DeepSpeed features: ignored when the math is unchanged, errors when not") {
  auto parsed = parse(std::string("{") + kBatch +
                      R"(, "eigenvalue": {"enabled": true}, "wandb": {"enabled": false},
      "compile": {"deepcompile": true}, "tensorboard": {"enabled": true}, "comms_logger": {"enabled": false},
      "autotuning": {"enabled": false}, "comet": {"enabled": false}})");
  CHECK(parsed.warnings.size() == 2);  // disabled features and implemented monitors stay silent
  CHECK(mentions(find(parsed.warnings, "eigenvalue"), "ignored"));
  CHECK(find(parsed.warnings, "compile").path == "compile");
  CHECK(parsed.config.tensorboard.enabled);
  CHECK(errors_of(std::string("{") + kBatch + R"(, "eigenvalue": {"enabled": true}})", ws(1, true))
            .size() == 1);

  for (const char* feature :
       {R"("amp": {"enabled": true})", R"("progressive_layer_drop": {"enabled": true})",
        R"("curriculum_learning": {"enabled": true})", R"("optimizer": {"type": "Lamb"})",
        R"("optimizer": {"type": "OneBitAdam"})", R"("scheduler": {"type": "StepLR"})",
        R"("sequence_parallel_size": 2)",
        R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true})"}) {
    INFO(feature);
    auto d = errors_of(std::string("{") + kBatch + ", " + feature + "}");
    CHECK(d.size() == 1);
    CHECK(mentions(d[0], "not supported"));
  }
  CHECK(parse(std::string("{") + kBatch + R"(, "amp": {"enabled": false}})").warnings.empty());
  // ZeRO++'s qwZ, hpZ and qgZ are built at stage 3; elsewhere they do nothing and say so.
  {
    const zero::ParsedConfig z3 = parse(
        std::string("{") + kBatch +
        R"(, "zero_optimization": {"stage": 3, "zero_quantized_weights": true, "zero_hpz_partition_size": 8, "zero_quantized_gradients": true}})");
    CHECK(z3.warnings.empty());
    CHECK(z3.config.zero_optimization.zero_quantized_weights);
    CHECK(z3.config.zero_optimization.zero_hpz_partition_size == 8);
    const zero::ParsedConfig z2 = parse(
        std::string("{") + kBatch +
        R"(, "zero_optimization": {"stage": 2, "zero_quantized_weights": true, "zero_hpz_partition_size": 8, "zero_quantized_nontrainable_weights": true, "zero_quantized_gradients": true}})");
    CHECK(z2.warnings.size() == 4);
    CHECK(mentions(find(z2.warnings, "zero_optimization.zero_quantized_gradients"),
                   "no effect at stage 2"));
    CHECK(mentions(find(z2.warnings, "zero_optimization.zero_quantized_weights"),
                   "no effect at stage 2"));
    CHECK(mentions(find(z2.warnings, "zero_optimization.zero_hpz_partition_size"),
                   "no effect at stage 2"));
    CHECK(mentions(find(z2.warnings, "zero_optimization.zero_quantized_nontrainable_weights"),
                   "frozen parameters"));
  }
  // host_shared_params (ours) acts at stages 1-3, and says where it cannot.
  {
    auto shared = [&](const std::string& zero) {
      return parse(std::string("{") + kBatch +
                   R"(, "zero_optimization": {"host_shared_params": true, )" + zero + "}}");
    };
    const zero::ParsedConfig s3 = shared(R"("stage": 3)");
    CHECK(s3.warnings.empty());
    CHECK(s3.config.zero_optimization.host_shared_params);
    CHECK(shared(R"("stage": 1)").warnings.empty());
    CHECK(mentions(find(shared(R"("stage": 0)").warnings, "zero_optimization.host_shared_params"),
                   "no effect at stage 0"));
    CHECK(mentions(find(shared(R"("stage": 3, "zero_hpz_partition_size": 2)").warnings,
                        "zero_optimization.host_shared_params"),
                   "no effect with hpZ"));
    CHECK(mentions(find(shared(R"("stage": 3, "offload_param": {"device": "cpu"})").warnings,
                        "zero_optimization.host_shared_params"),
                   "no effect with offload_param"));
  }
  // Optimizer offload to NVMe is built, at every ZeRO stage that has an optimizer partition.
  CHECK(
      parse(
          std::string("{") + kBatch +
          R"(, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}})")
          .config.zero_optimization.offload_optimizer.device == "nvme");
  // And parameter offload at stage 3 (cpu or nvme) with its buffers and max_in_cpu.
  const zero::ParsedConfig p = parse(
      std::string("{") + kBatch +
      R"(, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x",
          "buffer_count": 3, "buffer_size": 1000, "max_in_cpu": 0}}})");
  CHECK(p.warnings.empty());
  CHECK(p.config.zero_optimization.offload_param.device == "nvme");
  CHECK(p.config.zero_optimization.offload_param.buffer_size == 1000);
  CHECK(p.config.zero_optimization.offload_param.max_in_cpu == 0);
}

TEST_CASE("wandb and comet have no C++ client: an error that points to tensorboard/csv_monitor") {
  for (const char* section : {R"("wandb": {"enabled": true, "project": "p"})",
                              R"("comet": {"enabled": true, "project": "p"})"}) {
    INFO(section);
    auto d = errors_of(std::string("{") + kBatch + ", " + section + "}");
    REQUIRE(d.size() == 1);
    CHECK(mentions(d[0], "no C++ client"));
    CHECK(mentions(d[0], "tensorboard"));
    CHECK(mentions(d[0], "csv_monitor"));
  }
  CHECK(parse(std::string("{") + kBatch + R"(, "wandb": {"enabled": false}, "comet": {}})")
            .warnings.empty());
}

TEST_CASE("optimizer and scheduler params are checked like DeepSpeed's constructors") {
  auto d =
      errors_of(std::string("{") + kBatch +
                R"(, "optimizer": {"type": "SGD", "params": {"lr": 0.1, "betas": [0.9, 0.99]}}})");
  CHECK(mentions(find(d, "optimizer.params.betas"), "unknown key 'betas' in SGD parameters"));
  d = errors_of(std::string("{") + kBatch +
                R"(, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})");
  CHECK(mentions(find(d, "optimizer.params.max_grad_norm"), "gradient_clipping"));
  d = errors_of(std::string("{") + kBatch +
                R"(, "scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 5}}})");
  CHECK(find(d, "scheduler.params.total_num_steps").path == "scheduler.params.total_num_steps");
  d = errors_of(std::string("{") + kBatch + R"(, "scheduler": {"type": "warmuplr"}})");
  CHECK(mentions(find(d, "scheduler.type"), "did you mean \"WarmupLR\"?"));
  d = errors_of(std::string("{") + kBatch +
                R"(, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.1}}})");
  CHECK(mentions(find(d, "scheduler.params.cycle_max_lr"), "missing"));

  Config c = parse(std::string("{") + kBatch +
                   R"(, "optimizer": {"type": "adam", "params": {"lr": 0.01, "weight_decay": 0.1}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 100, "warmup_type": "linear"}}})")
                 .config;
  CHECK(c.optimizer.type == "Adam");  // DeepSpeed matches its optimizer names case-insensitively
  CHECK(c.optimizer.adam_w_mode);     // and its "Adam" defaults to decoupled weight decay
  CHECK(c.optimizer.betas == std::array<double, 2>{0.9, 0.999});
  CHECK(c.scheduler.total_num_steps == 100);
  CHECK(c.scheduler.warmup_max_lr == 0.001);
  CHECK(c.scheduler.warmup_num_steps == 1000);
  CHECK(c.scheduler.warmup_type == "linear");
  Config w = parse(std::string("{") + kBatch + R"(, "scheduler": {"type": "WarmupLR"}})").config;
  CHECK(!w.scheduler.warmup_max_lr.has_value());  // DeepSpeed: the optimizer's lr
}

TEST_CASE("deprecated forms are accepted with a warning and mapped") {
  auto p =
      parse(std::string("{") + kBatch + R"(, "zero_optimization": true, "allgather_size": 1000})");
  CHECK(p.config.zero_optimization.stage == 1);
  CHECK(p.config.zero_optimization.allgather_bucket_size == 1000);
  CHECK(mentions(find(p.warnings, "zero_optimization"), "deprecated"));
  CHECK(parse(std::string("{") + kBatch + R"(, "zero_optimization": false})")
            .config.zero_optimization.stage == 0);
  CHECK(parse(std::string("{") + kBatch + R"(, "zero_optimization": 2})")
            .config.zero_optimization.stage == 2);

  p = parse(std::string("{") + kBatch + R"(, "zero_optimization": {"stage": 3, "cpu_offload": true,
      "cpu_offload_param": true, "cpu_offload_use_pin_memory": true,
      "stage3_gather_fp16_weights_on_model_save": true}, "bfloat16": {"enabled": true}})");
  const auto& z = p.config.zero_optimization;
  CHECK(z.offload_optimizer.device == "cpu");
  CHECK(z.offload_param.device == "cpu");
  CHECK(z.offload_optimizer.pin_memory);
  CHECK(z.offload_param.pin_memory);
  CHECK(p.config.bf16.enabled);
  CHECK(p.warnings.size() == 5);
  for (const auto& w : p.warnings) CHECK(mentions(w, "deprecated"));

  auto d = errors_of(std::string("{") + kBatch +
                     R"(, "zero_optimization": {"stage": 2, "cpu_offload": true,
      "offload_optimizer": {"device": "cpu"}}})");
  CHECK(mentions(find(d, "zero_optimization.cpu_offload"), "both given"));
  d = errors_of(std::string("{") + kBatch +
                R"(, "bf16": {"enabled": true}, "bfloat16": {"enabled": true}})");
  CHECK(find(d, "bfloat16").path == "bfloat16");
}

TEST_CASE("stage 3 aliases without the stage3_ prefix are accepted, but not both spellings") {
  Config c = parse(std::string("{") + kBatch +
                   R"(, "zero_optimization": {"stage": 3, "prefetch_bucket_size": 7,
      "param_persistence_threshold": 8, "max_live_parameters": 9, "max_reuse_distance": 10,
      "gather_16bit_weights_on_model_save": true}})")
                 .config;
  CHECK(c.zero_optimization.stage3_prefetch_bucket_size == 7);
  CHECK(c.zero_optimization.stage3_param_persistence_threshold == 8);
  CHECK(c.zero_optimization.stage3_max_live_parameters == 9);
  CHECK(c.zero_optimization.stage3_max_reuse_distance == 10);
  auto d = errors_of(
      std::string("{") + kBatch +
      R"(, "zero_optimization": {"stage": 3, "prefetch_bucket_size": 7, "stage3_prefetch_bucket_size": 7}})");
  CHECK(mentions(d[0], "aliases"));
}

TEST_CASE("integers may be written as strings or integral floats; fractions are errors") {
  Config c =
      parse(
          R"({"train_batch_size": "16", "zero_optimization": {"stage": "2", "reduce_bucket_size": 2e8,
      "allgather_bucket_size": 5e8}, "optimizer": {"type": "AdamW", "params": {"lr": "3e-5"}}})")
          .config;
  CHECK(c.train_batch_size == 16);
  CHECK(c.zero_optimization.stage == 2);
  CHECK(c.zero_optimization.reduce_bucket_size == 200000000);
  CHECK(c.optimizer.lr == 3e-5);
  auto d = errors_of(R"({"train_batch_size": 2.5})");
  CHECK(mentions(d[0], "not a whole number"));
  d = errors_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 4}})");
  CHECK(mentions(d[0], "between 0 and 3"));
  d = errors_of(R"({"train_batch_size": 8, "steps_per_print": 1e30})");
  CHECK(mentions(d[0], "64-bit"));
}

TEST_CASE("\"auto\" takes the default, a value derived from the world size, or a supplied value") {
  std::string text = R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4,
      "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "fp16": {"enabled": "auto"},
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto"}})";
  Config c = parse(text, ws(4)).config;
  CHECK(c.train_batch_size == 16);
  CHECK(c.gradient_accumulation_steps == 1);
  CHECK(c.gradient_clipping == 0.0);
  CHECK(!c.fp16.enabled);
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(c.zero_optimization.reduce_bucket_size == 500000000);
  CHECK(c.zero_optimization.stage3_prefetch_bucket_size == 50000000);

  ConfigOptions o = ws(4);
  o.overrides = {{"gradient_accumulation_steps", "2"},
                 {"optimizer.params.lr", "5e-5"},
                 {"fp16.enabled", "true"},
                 {"gradient_clipping", "1.0"}};
  auto p = parse(text, o);
  CHECK(p.config.train_batch_size == 32);
  CHECK(p.config.optimizer.lr == 5e-5);
  CHECK(p.config.fp16.enabled);
  CHECK(p.config.gradient_clipping == 1.0);
  CHECK(p.warnings.empty());  // filling "auto" is not a contradiction

  o.overrides = {{"train_micro_batch_size_per_gpu", "2"},
                 {"zero_optimization.offload_optimizer.device", "cpu"}};
  p = parse(text, o);
  CHECK(p.config.train_micro_batch_size_per_gpu == 2);
  CHECK(p.config.zero_optimization.offload_optimizer.device == "cpu");  // a bare word is a string
  auto w = find(p.warnings, "train_micro_batch_size_per_gpu");
  CHECK(w.file == "--set");
  CHECK(mentions(w, "replaces the file's value 4"));

  auto d =
      errors_of(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"})", ws(8));
  CHECK(find(d, "train_micro_batch_size_per_gpu").line == 1);
  d = errors_of(R"({"gradient_accumulation_steps": 4})");
  CHECK(mentions(find(d, "train_batch_size"), "missing"));
  d = errors_of(
      std::string("{") + kBatch +
      R"(, "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": "auto"}}})");
  CHECK(mentions(find(d, "scheduler.params.total_num_steps"), "\"auto\" needs a value"));
  o = ws(1);
  o.overrides = {{"zero_optimization..stage", "1"}};
  CHECK(mentions(errors_of(std::string("{") + kBatch + "}", o)[0], "invalid override key"));
}

TEST_CASE(
    "batch rule: train_batch_size = micro * accumulation * world_size, derived like DeepSpeed") {
  struct Case {
    const char* json;
    int world;
    int64_t tb, mb, gas;
  };
  for (
      const Case& k :
      {Case{
           R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2)",
           8, 64, 4, 2},
       Case{R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 4)", 8, 64, 4, 2},
       Case{R"("train_batch_size": 64, "gradient_accumulation_steps": 4)", 4, 64, 4, 4},
       Case{R"("train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5)", 3, 45, 3,
            5},
       Case{R"("train_batch_size": 24)", 3, 24, 8, 1},
       Case{R"("train_micro_batch_size_per_gpu": 5)", 7, 35, 5, 1}}) {
    INFO(k.json << " at world size " << k.world);
    Config c = parse(std::string("{") + k.json + "}", ws(k.world)).config;
    CHECK(c.train_batch_size == k.tb);
    CHECK(c.train_micro_batch_size_per_gpu == k.mb);
    CHECK(c.gradient_accumulation_steps == k.gas);
    CHECK(c.world_size == k.world);
  }
  auto d = errors_of(
      R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})",
      ws(4));
  CHECK(mentions(find(d, "train_batch_size"),
                 "train_batch_size (30) must equal train_micro_batch_size_per_gpu (4) * "
                 "gradient_accumulation_steps (2) * world_size (4) = 32"));
  CHECK(!errors_of(R"({"train_batch_size": 10})", ws(4)).empty());  // 10 is not divisible by 4
  CHECK(!errors_of(R"({"train_batch_size": 0})").empty());
  CHECK(
      !errors_of(
           R"({"train_micro_batch_size_per_gpu": 9223372036854775807, "gradient_accumulation_steps": 4})")
           .empty());
  CHECK_THROWS_AS(parse(std::string("{") + kBatch + "}", ws(0)), ConfigFileError);
}

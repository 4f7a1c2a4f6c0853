// Readers of the optimizer and scheduler sections: DeepSpeed passes `params` to the optimizer's
// or schedule's constructor, so an unknown parameter is an error (a TypeError in DeepSpeed).
#include <cmath>

#include "config_detail.h"

namespace zero::detail {

namespace {

const std::vector<std::string> kOptimizers = {"Adam", "AdamW", "SGD"};
// DeepSpeed's own optimizers and torch.optim fallbacks this engine does not implement.
const std::vector<std::string> kUnsupportedOptimizers = {
    "OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Lamb",     "Lion",       "Adagrad", "MuAdam",
    "MuAdamW",    "MuSGD",       "Muon",       "Adadelta", "Adamax",     "ASGD",    "LBFGS",
    "NAdam",      "RAdam",       "RMSprop",    "Rprop",    "SparseAdam", "CPUAdam", "FusedAdam"};
const std::vector<std::string> kSchedulers = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                              "OneCycle", "LRRangeTest"};

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The optimizer or scheduler type: a required string.
bool read_type(Section& s, std::string& out) {
  const nlohmann::json* v = s.get("type");
  if (!v) {
    s.ctx.error(s.child("type"), "missing: the " + s.path() + " section needs a \"type\"");
    return false;
  }
  if (s.is_auto("type") || !v->is_string()) {
    s.ctx.error(s.child("type"), "expected a " + s.path() + " name, got " + type_name(*v));
    return false;
  }
  out = v->get<std::string>();
  return true;
}

}  // namespace

void read_optimizer(Section& root, OptimizerConfig& o) {
  Ctx& ctx = root.ctx;
  Section s(ctx, root.get("optimizer"), "optimizer", Unknown::kWarn);
  read_fixed(s, "legacy_fusion", false, Otherwise::kNoEffect,
             "it selects how DeepSpeed's fp16 optimizer calls its old fused Adam; the update is "
             "the same");
  const nlohmann::json* params_json = s.get("params");
  if (!s.exists()) return;
  std::string type;
  bool have_type = read_type(s, type);
  s.finish("optimizer");
  if (!have_type) return;
  std::string shown = type.size() > 40 ? type.substr(0, 40) + "..." : type;
  for (const std::string& name : kOptimizers) {
    if (lower(type) == lower(name))
      o.type = name;  // DeepSpeed matches its names case-insensitively
  }
  if (o.type.empty()) {
    for (const std::string& name : kUnsupportedOptimizers) {
      if (lower(type) == lower(name)) {
        ctx.error("optimizer.type", "not supported: optimizer \"" + shown +
                                        "\" is not implemented by this engine "
                                        "(supported: " +
                                        list(kOptimizers) + ")");
        return;
      }
    }
    std::string hint = nearest(type, kOptimizers);
    ctx.error("optimizer.type", "unknown optimizer \"" + shown + "\"" +
                                    (hint.empty() ? "" : "; did you mean \"" + hint + "\"?") +
                                    " (supported: " + list(kOptimizers) + ")");
    return;
  }

  Section p(ctx, params_json, "optimizer.params", Unknown::kError);
  p.read("lr", o.lr, 0.0, HUGE_VAL);
  p.read("weight_decay", o.weight_decay, 0.0, HUGE_VAL);
  if (o.type == "SGD") {
    o.betas = {0.0, 0.0};
    o.eps = 0.0;
    o.adam_w_mode = false;
    o.bias_correction = false;
    p.read("momentum", o.momentum, 0.0, HUGE_VAL);
    p.read("dampening", o.dampening, 0.0, HUGE_VAL);
    p.read("nesterov", o.nesterov);
    bool maximize = false;
    p.read("maximize", maximize);
    if (maximize)
      ctx.error("optimizer.params.maximize", "not supported: maximize flips the update direction");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
      ctx.error("optimizer.params.nesterov",
                "Nesterov momentum requires momentum > 0 and dampening 0 "
                "(torch.optim.SGD rejects this)");
    }
  } else {
    if (const nlohmann::json* b = p.get("betas"); b && !p.is_auto("betas")) {
      if (!b->is_array() || b->size() != 2) {
        ctx.error("optimizer.params.betas",
                  "expected an array of two numbers, got " + type_name(*b));
      } else {
        for (size_t i = 0; i < 2; ++i) {
          std::string path = "optimizer.params.betas[" + std::to_string(i) + "]";
          double beta = 0;
          if (!to_double(ctx, path, (*b)[i], beta)) continue;
          if (!(beta >= 0.0 && beta < 1.0))
            ctx.error(path, "a beta must be in [0, 1), got " + (*b)[i].dump());
          else
            o.betas[i] = beta;
        }
      }
    }
    p.read("eps", o.eps, 0.0, HUGE_VAL);
    p.read("bias_correction", o.bias_correction);
    read_fixed(p, "torch_adam", false, Otherwise::kNoEffect,
               "DeepSpeed then runs torch.optim.Adam/AdamW instead of FusedAdam, the same update; "
               "this engine runs its own Adam kernels either way");
    p.read("amsgrad", o.amsgrad);
    read_fixed(p, "set_grad_none", true, Otherwise::kNoEffect,
               "it only decides whether FusedAdam's zero_grad sets gradients to None or to zero; "
               "this engine owns the gradient buffers");
    if (o.amsgrad)
      ctx.error("optimizer.params.amsgrad",
                "not supported: AMSGrad (DeepSpeed's FusedAdam rejects it too)");
    bool w_mode = true;
    bool given = p.read("adam_w_mode", w_mode);
    if (o.type == "AdamW") {
      o.adam_w_mode = true;
      if (given && !w_mode) {
        ctx.warn("optimizer.params.adam_w_mode",
                 "ignored: AdamW always uses decoupled weight decay (as in DeepSpeed)");
      }
    } else {
      o.adam_w_mode = w_mode;  // DeepSpeed's "Adam" defaults to adam_w_mode = true
    }
  }
  if (p.get("max_grad_norm")) {
    ctx.error("optimizer.params.max_grad_norm",
              "not a parameter of " + o.type +
                  " (DeepSpeed fails with a "
                  "TypeError); use the top-level gradient_clipping");
  }
  p.finish(o.type + " parameters (DeepSpeed passes them to the optimizer's constructor)");
}

void read_scheduler(Section& root, SchedulerConfig& c) {
  Ctx& ctx = root.ctx;
  Section s(ctx, root.get("scheduler"), "scheduler", Unknown::kWarn);
  const nlohmann::json* params_json = s.get("params");
  if (!s.exists()) return;
  std::string type;
  bool have_type = read_type(s, type);
  s.finish("scheduler");
  if (!have_type) return;
  std::string shown = type.size() > 40 ? type.substr(0, 40) + "..." : type;
  for (const std::string& name : kSchedulers) {
    if (type == name) c.type = name;
  }
  if (c.type.empty()) {
    std::string hint = nearest(type, kSchedulers);
    ctx.error(
        "scheduler.type",
        "not supported: scheduler \"" + shown + "\"" +
            (hint.empty() ? "" : " (did you mean \"" + hint + "\"? names are case-sensitive)") +
            "; supported: " + list(kSchedulers));
    return;
  }

  Section p(ctx, params_json, "scheduler.params", Unknown::kError);
  p.read("last_batch_iteration", c.last_batch_iteration, -1, INT64_MAX);
  auto required = [&](const char* key, bool found) {
    if (found) return;
    ctx.error(std::string("scheduler.params.") + key,
              std::string(p.is_auto(key) ? "\"auto\" needs a value: " : "missing: ") + c.type +
                  " requires " + key +
                  "; give it in the file or supply it (--set scheduler.params." + key +
                  "=N, or ConfigOptions::overrides)");
  };
  const std::vector<std::string> warmup_types = {"log", "linear"};
  if (c.type == "WarmupLR" || c.type == "WarmupDecayLR") {
    p.read("warmup_min_lr", c.warmup_min_lr, 0.0, HUGE_VAL);
    double max_lr = 0.001;
    if (p.read("warmup_max_lr", max_lr, 0.0, HUGE_VAL))
      c.warmup_max_lr = max_lr;
    else if (c.type == "WarmupDecayLR")
      c.warmup_max_lr = 0.001;
    p.read("warmup_num_steps", c.warmup_num_steps, 1, INT64_MAX);
    p.read_enum("warmup_type", c.warmup_type, warmup_types, false);
    if (c.type == "WarmupDecayLR")
      required("total_num_steps", p.read("total_num_steps", c.total_num_steps, 1, INT64_MAX));
  } else if (c.type == "WarmupCosineLR") {
    required("total_num_steps", p.read("total_num_steps", c.total_num_steps, 1, INT64_MAX));
    p.read("warmup_min_ratio", c.warmup_min_ratio, 0.0, 1.0);
    p.read("warmup_num_steps", c.warmup_num_steps, 1, INT64_MAX);
    p.read("cos_min_ratio", c.cos_min_ratio, 0.0, 1.0);
    p.read_enum("warmup_type", c.warmup_type, warmup_types, false);
  } else if (c.type == "OneCycle") {
    required("cycle_min_lr", p.read("cycle_min_lr", c.cycle_min_lr, 0.0, HUGE_VAL));
    required("cycle_max_lr", p.read("cycle_max_lr", c.cycle_max_lr, 0.0, HUGE_VAL));
    p.read("decay_lr_rate", c.decay_lr_rate, 0.0, HUGE_VAL);
    p.read("cycle_first_step_size", c.cycle_first_step_size, 1, INT64_MAX);
    int64_t v = 0;
    if (p.read("cycle_second_step_size", v, 1, INT64_MAX)) c.cycle_second_step_size = v;
    p.read("cycle_first_stair_count", c.cycle_first_stair_count, 0, INT64_MAX);
    if (p.read("cycle_second_stair_count", v, 0, INT64_MAX)) c.cycle_second_stair_count = v;
    p.read("decay_step_size", c.decay_step_size, 0, INT64_MAX);
    p.read("cycle_momentum", c.cycle_momentum);
    p.read("cycle_min_mom", c.cycle_min_mom, 0.0, 1.0);
    p.read("cycle_max_mom", c.cycle_max_mom, 0.0, 1.0);
    p.read("decay_mom_rate", c.decay_mom_rate, 0.0, HUGE_VAL);
  } else {  // LRRangeTest
    p.read("lr_range_test_min_lr", c.lr_range_test_min_lr, 0.0, HUGE_VAL);
    p.read("lr_range_test_step_size", c.lr_range_test_step_size, 1, INT64_MAX);
    p.read("lr_range_test_step_rate", c.lr_range_test_step_rate, 0.0, HUGE_VAL);
    p.read("lr_range_test_staircase", c.lr_range_test_staircase);
  }
  p.finish(c.type + " parameters (DeepSpeed passes them to the schedule's constructor)");
}

}  // namespace zero::detail

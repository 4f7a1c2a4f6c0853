// render_svg / render_html: a small hand-written plotter (no dependency): panels in a two-column
// grid, linear axes with "nice" ticks (log2 for the loss scale), a colour per run and a dash
// pattern per series where a panel holds several (time split, memory), a shared legend.
#include <zero/monitor/plot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

namespace zero::monitor {
namespace {

struct Series {
  std::string stem;   // CSV file name without ".csv"
  std::string label;  // in the panel's own legend when it has several series
  double scale = 1;   // value multiplier (bytes -> MiB)
};

struct PanelSpec {
  std::string title;
  std::vector<Series> series;
  bool log2 = false;
};

constexpr double kMiB = 1.0 / (1024 * 1024);

// DeepSpeed's events and the engine's, in reading order; any other CSV follows by name.
const PanelSpec kKnown[] = {
    {"train loss", {{"Train_Samples_train_loss", ""}}},
    {"learning rate", {{"Train_Samples_lr", ""}}},
    {"loss scale (log2 axis)", {{"Train_Samples_loss_scale", ""}}, true},
    {"global grad norm", {{"Train_Samples_grad_norm", ""}}},
    {"throughput (samples/s)", {{"Train_Samples_samples_per_sec", ""}}},
    {"throughput (tokens/s)", {{"Train_Samples_tokens_per_sec", ""}}},
    {"achieved TFLOPS per rank", {{"Train_Samples_tflops", ""}}},
    {"step time split (ms)",
     {{"Train_Samples_time_fwd_ms", "fwd"},
      {"Train_Samples_time_bwd_ms", "bwd"},
      {"Train_Samples_time_step_ms", "step"},
      {"Train_Samples_time_bwd_allreduce_ms", "bwd_allreduce"},
      {"Train_Samples_time_stage3_gather_wait_ms", "gather wait"},
      {"Train_Samples_time_offload_copy_ms", "offload copy"}}},
    {"memory per rank (MiB)",
     {{"Train_Samples_model_states_bytes", "model states", kMiB},
      {"Train_Samples_peak_gathered_bytes", "peak gathered", kMiB},
      {"Train_Samples_host_bytes", "host", kMiB}}},
    {"skipped steps (inf/NaN gradients)", {{"Train_Samples_skipped_steps", ""}}},
};
// Shown only through the panels above (the total is the time split's sum).
const char* const kHidden[] = {"Train_Samples_step_time_ms", "Train_Samples_time_bwd_inner_ms"};
const char* const kDashes[] = {"", "6,3", "2,2", "8,3,2,3", "1,3", "10,4"};

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                               "#9467bd", "#8c564b", "#e377c2", "#17becf"};

constexpr int kPanelW = 470, kPanelH = 270, kCols = 2, kMarginL = 70, kMarginR = 16, kMarginT = 30,
              kMarginB = 40, kLegendH = 30;

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Ticks at multiples of 1, 2 or 5 x 10^k covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 5) {
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::string title_of(const std::string& stem) {
  const std::string prefix = "Train_Samples_";  // the program's own Train/Samples/... events
  return stem.rfind(prefix, 0) == 0 ? stem.substr(prefix.size()) : stem;
}

void draw_panel(std::ostringstream& svg, const PanelSpec& spec, const std::vector<PlotRun>& runs,
                int x0, int y0) {
  const double pl = x0 + kMarginL, pr = x0 + kPanelW - kMarginR;
  const double pt = y0 + kMarginT, pb = y0 + kPanelH - kMarginB;
  auto yv = [&](double v) { return spec.log2 ? std::log2(v) : v; };
  double xmin = HUGE_VAL, xmax = -HUGE_VAL, ymin = HUGE_VAL, ymax = -HUGE_VAL;
  std::vector<const Series*> shown;  // the series some run has
  for (const Series& series : spec.series) {
    bool any = false;
    for (const PlotRun& run : runs) {
      auto it = run.series.find(series.stem);
      if (it == run.series.end()) continue;
      any = any || !it->second.points.empty();
      for (const auto& [x, raw] : it->second.points) {
        const double v = raw * series.scale;
        if (!std::isfinite(v) || (spec.log2 && v <= 0)) continue;
        xmin = std::min(xmin, static_cast<double>(x));
        xmax = std::max(xmax, static_cast<double>(x));
        ymin = std::min(ymin, yv(v));
        ymax = std::max(ymax, yv(v));
      }
    }
    if (any) shown.push_back(&series);
  }
  svg << "<g>\n<rect x=\"" << x0 + 4 << "\" y=\"" << y0 + 4 << "\" width=\"" << kPanelW - 8
      << "\" height=\"" << kPanelH - 8 << "\" fill=\"#ffffff\" stroke=\"#cccccc\"/>\n";
  svg << "<text x=\"" << px((pl + pr) / 2) << "\" y=\"" << y0 + 22
      << "\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" << esc(spec.title)
      << "</text>\n";
  if (xmin > xmax) {
    svg << "<text x=\"" << px((pl + pr) / 2) << "\" y=\"" << px((pt + pb) / 2)
        << "\" text-anchor=\"middle\" font-size=\"12\" fill=\"#888888\">no finite values</text>\n"
        << "</g>\n";
    return;
  }
  if (xmax == xmin) xmin -= 1, xmax += 1;
  if (ymax == ymin) {
    const double pad = ymin == 0 ? 1 : std::abs(ymin) * 0.1;
    ymin -= pad, ymax += pad;
  } else {
    const double pad = (ymax - ymin) * 0.05;
    ymin -= pad, ymax += pad;
  }
  auto sx = [&](double x) { return pl + (x - xmin) / (xmax - xmin) * (pr - pl); };
  auto sy = [&](double y) { return pb - (y - ymin) / (ymax - ymin) * (pb - pt); };
  for (double t : nice_ticks(ymin, ymax)) {
    svg << "<line x1=\"" << px(pl) << "\" y1=\"" << px(sy(t)) << "\" x2=\"" << px(pr) << "\" y2=\""
        << px(sy(t)) << "\" stroke=\"#eeeeee\"/>\n<text x=\"" << px(pl - 6) << "\" y=\""
        << px(sy(t) + 4) << "\" text-anchor=\"end\" font-size=\"11\">"
        << (spec.log2 ? "2^" + num(t) : num(t)) << "</text>\n";
  }
  for (double t : nice_ticks(xmin, xmax)) {
    svg << "<line x1=\"" << px(sx(t)) << "\" y1=\"" << px(pb) << "\" x2=\"" << px(sx(t))
        << "\" y2=\"" << px(pb + 4) << "\" stroke=\"#333333\"/>\n<text x=\"" << px(sx(t))
        << "\" y=\"" << px(pb + 16) << "\" text-anchor=\"middle\" font-size=\"11\">" << num(t)
        << "</text>\n";
  }
  svg << "<text x=\"" << px((pl + pr) / 2) << "\" y=\"" << px(pb + 32)
      << "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555555\">samples</text>\n";
  svg << "<polyline points=\"" << px(pl) << "," << px(pt) << " " << px(pl) << "," << px(pb) << " "
      << px(pr) << "," << px(pb) << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  for (size_t k = 0; k < shown.size(); ++k) {
    const Series& series = *shown[k];
    const char* dash = kDashes[k % (sizeof kDashes / sizeof kDashes[0])];
    if (shown.size() > 1) {  // the panel's own legend: dash pattern -> series
      const double ly = pt + 4 + 13.0 * static_cast<double>(k);
      svg << "<line x1=\"" << px(pr - 110) << "\" y1=\"" << px(ly) << "\" x2=\"" << px(pr - 86)
          << "\" y2=\"" << px(ly) << "\" stroke=\"#333333\" stroke-dasharray=\"" << dash
          << "\"/>\n<text x=\"" << px(pr - 80) << "\" y=\"" << px(ly + 4) << "\" font-size=\"10\">"
          << esc(series.label) << "</text>\n";
    }
    for (size_t r = 0; r < runs.size(); ++r) {
      auto it = runs[r].series.find(series.stem);
      if (it == runs[r].series.end()) continue;
      std::ostringstream points;
      size_t n = 0;
      for (const auto& [x, raw] : it->second.points) {
        const double v = raw * series.scale;
        if (!std::isfinite(v) || (spec.log2 && v <= 0)) continue;
        points << (n++ ? " " : "") << px(sx(static_cast<double>(x))) << "," << px(sy(yv(v)));
      }
      const char* color = kColors[r % (sizeof kColors / sizeof kColors[0])];
      if (n == 1) {
        const std::string p = points.str();
        const size_t comma = p.find(',');
        svg << "<circle cx=\"" << p.substr(0, comma) << "\" cy=\"" << p.substr(comma + 1)
            << "\" r=\"3\" fill=\"" << color << "\"/>\n";
      } else if (n > 1) {
        svg << "<polyline points=\"" << points.str() << "\" fill=\"none\" stroke=\"" << color
            << "\" stroke-width=\"1.5\" stroke-dasharray=\"" << dash << "\"/>\n";
      }
    }
  }
  svg << "</g>\n";
}

}  // namespace

PlotRun read_run(const std::string& dir, const std::string& label) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ZERO_CHECK(fs::is_directory(dir, ec), MonitorError, "'", dir,
             "' is not a directory (give a csv_monitor log directory: output_path/job_name)");
  PlotRun run{label, {}};
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".csv") continue;
    run.series[entry.path().stem().string()] = read_csv_series(entry.path().string());
  }
  ZERO_CHECK(!run.series.empty(), MonitorError, "'", dir,
             "' has no CSV files (is it a csv_monitor log directory: output_path/job_name?)");
  return run;
}

std::string render_svg(const std::vector<PlotRun>& runs) {
  std::vector<PanelSpec> panels;
  std::set<std::string> stems;
  for (const PlotRun& run : runs)
    for (const auto& [stem, series] : run.series)
      if (!series.points.empty()) stems.insert(stem);
  for (const char* hidden : kHidden) stems.erase(hidden);
  for (const PanelSpec& p : kKnown) {
    bool any = false;
    for (const Series& series : p.series) any = stems.erase(series.stem) > 0 || any;
    if (any) panels.push_back(p);
  }
  for (const std::string& stem : stems) panels.push_back({title_of(stem), {{stem, ""}}, false});
  ZERO_CHECK(!panels.empty(), MonitorError, "nothing to plot: the runs' CSV files have no rows");

  const int rows = static_cast<int>((panels.size() + kCols - 1) / kCols);
  const int width = kCols * kPanelW, height = rows * kPanelH + kLegendH;
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#f7f7f7\"/>\n";
  double lx = 12;
  for (size_t r = 0; r < runs.size(); ++r) {
    const char* color = kColors[r % (sizeof kColors / sizeof kColors[0])];
    svg << "<rect x=\"" << px(lx) << "\" y=\"10\" width=\"18\" height=\"4\" fill=\"" << color
        << "\"/>\n<text x=\"" << px(lx + 24) << "\" y=\"17\" font-size=\"12\">"
        << esc(runs[r].label) << "</text>\n";
    lx += 40 + 7.0 * static_cast<double>(runs[r].label.size());
  }
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(svg, panels[i], runs, static_cast<int>(i % kCols) * kPanelW,
               kLegendH + static_cast<int>(i / kCols) * kPanelH);
  svg << "</svg>\n";
  return svg.str();
}

std::string render_html(const std::vector<PlotRun>& runs) {
  std::string svg = render_svg(runs);
  svg.erase(0, svg.find("<svg"));  // no XML declaration inside HTML
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<title>zero plot</title>\n<style>body{font-family:sans-serif;margin:16px;background:"
       << "#f7f7f7}svg{max-width:100%;height:auto}</style>\n</head>\n<body>\n<h1>zero plot</h1>\n"
       << "<p>Runs:";
  for (size_t r = 0; r < runs.size(); ++r)
    html << (r ? ", " : " ")
         << "<span style=\"color:" << kColors[r % (sizeof kColors / sizeof kColors[0])] << "\">"
         << esc(runs[r].label) << "</span>";
  html << " (x axis: samples trained)</p>\n" << svg << "</body>\n</html>\n";
  return html.str();
}

}  // namespace zero::monitor

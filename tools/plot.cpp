// `zero plot RUN_DIR... [--out FILE.svg|FILE.html]`: the curves of csv_monitor runs (loss, lr,
// loss scale, grad norm, throughput, time split, memory, any other event), runs overlaid.
#include <zero/monitor/plot.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"

namespace zero::tools {
namespace {

const char* kUsage =
    "usage: zero plot RUN_DIR... [--out FILE.svg|FILE.html]\n"
    "  RUN_DIR: a csv_monitor log directory (output_path/job_name of the ds_config);\n"
    "  several are overlaid, one colour each. Default output: plot.svg; a name ending in\n"
    "  .html writes one self-contained HTML page with the SVG inline.\n"
    "example:\n"
    "  zero plot runs/csv/gpt_stage2 --out plot.html\n";

int run_plot(const std::vector<std::string>& args) {
  std::vector<std::string> dirs;
  std::string out = "plot.svg";
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--out") {
      ZERO_CHECK(i + 1 < args.size(), UsageError, "--out needs a file name\n", kUsage);
      out = args[++i];
    } else if (a.rfind("--out=", 0) == 0) {
      out = a.substr(6);
    } else if (a.rfind("--", 0) == 0) {
      throw UsageError("unknown option '" + a + "'\n" + kUsage);
    } else {
      dirs.push_back(a);
    }
  }
  ZERO_CHECK(!dirs.empty(), UsageError, "no RUN_DIR given\n", kUsage);
  std::vector<monitor::PlotRun> runs;
  for (const std::string& dir : dirs) {
    std::string label = dir;
    while (label.size() > 1 && label.back() == '/') label.pop_back();
    runs.push_back(monitor::read_run(dir, label));
  }
  const bool html = out.size() >= 5 && out.compare(out.size() - 5, 5, ".html") == 0;
  const std::string page = html ? monitor::render_html(runs) : monitor::render_svg(runs);
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file << page;
  file.close();
  ZERO_CHECK(file, UsageError, "cannot write '", out, "'");
  std::cout << "zero plot: wrote " << out << " (" << runs.size() << " run"
            << (runs.size() == 1 ? "" : "s") << ")\n";
  return 0;
}

}  // namespace

ZERO_COMMAND("plot",
             "plot csv_monitor runs (loss, lr, grad norm, throughput, time, memory): SVG/HTML",
             run_plot);

}  // namespace zero::tools

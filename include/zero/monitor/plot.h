// Curves of csv_monitor runs as one self-contained SVG or HTML page (`zero plot`): panels for
// loss, lr, loss scale, grad norm, throughput, time split, memory, then any other event; every
// run overlaid in a colour.
#pragma once

#include <zero/monitor/csv_monitor.h>

#include <map>
#include <string>
#include <vector>

namespace zero::monitor {

// One run: a label and its series by event file stem ("Train_Samples_lr").
struct PlotRun {
  std::string label;
  std::map<std::string, CsvSeries> series;
};

// Reads every *.csv of a csv_monitor log directory (output_path/job_name). MonitorError when
// the directory is missing or holds no CSV file.
PlotRun read_run(const std::string& dir, const std::string& label);

// The SVG document. MonitorError when no run has any point.
std::string render_svg(const std::vector<PlotRun>& runs);
// One self-contained HTML page holding the same SVG inline (no script, no external file).
std::string render_html(const std::vector<PlotRun>& runs);

}  // namespace zero::monitor

// The shared parts of the monitors: DeepSpeed's log directory, Python's float repr (the CSV
// value format), and MonitorSet, which fans events out to every enabled monitor.
#include <zero/monitor/monitor.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

namespace zero::monitor {

std::string log_dir_of(const std::string& output_path, const std::string& job_name) {
  if (output_path.empty() || (!job_name.empty() && job_name[0] == '/')) return job_name;
  if (output_path.back() == '/') return output_path + job_name;
  return output_path + "/" + job_name;
}

// repr(float) in Python 3: the shortest digits that read back to the same double, positional
// when the decimal exponent is in [-4, 16), else d.ddde+XX with at least two exponent digits.
std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // "-1.2345e-05": shortest round-trip digits
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else {
      const size_t int_digits = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_digits) {
        out += digits + std::string(int_digits - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_digits) + "." + digits.substr(int_digits);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int magnitude = std::abs(exponent);
  out += exponent < 0 ? "e-" : "e+";
  if (magnitude < 10) out += "0";
  out += std::to_string(magnitude);
  return out;
}

MonitorSet::~MonitorSet() {
  try {
    flush();
  } catch (const std::exception& e) {
    // A destructor must not throw; the last interval is lost, and whoever reads the logs learns
    // why (the monitors write on rank 0 only).
    std::cerr << "zero monitor: the final flush failed, the last interval is lost: " << e.what()
              << std::endl;
  }
}

void MonitorSet::add(std::unique_ptr<Monitor> monitor) {
  monitors_.push_back(std::move(monitor));
}

void MonitorSet::write(const std::vector<Event>& events) {
  for (auto& m : monitors_) m->write(events);
}

void MonitorSet::flush() {
  for (auto& m : monitors_) m->flush();
}

}  // namespace zero::monitor

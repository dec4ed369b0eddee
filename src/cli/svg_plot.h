#pragma once
// A line chart as a standalone SVG file (no library): one panel per quantity, x shared, one line per series,
// a legend. Enough for `replay --sweep --plot`.
#include <string>
#include <vector>

namespace df::cli {

struct PlotSeries {
  std::string name;
  std::vector<double> y;  // one per x; NaN: no point
};

struct PlotPanel {
  std::string y_label;
  std::vector<PlotSeries> series;
};

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::vector<double>& x,
                           const std::vector<PlotPanel>& panels);

}  // namespace df::cli

#include "cli/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace df::cli {
namespace {

constexpr double kWidth = 720, kPanelHeight = 300, kLeft = 70, kRight = 170, kTop = 40, kBottom = 45;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#000000"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// A round step giving about `n` ticks over [0, hi].
double tick_step(double hi, int n) {
  const double raw = hi / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::vector<double>& x,
                           const std::vector<PlotPanel>& panels) {
  const double height = kTop + static_cast<double>(panels.size()) * (kPanelHeight + kBottom);
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{:.0f}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
      kWidth, height, kWidth / 2, escape(title));
  const double x_lo = x.empty() ? 0 : *std::min_element(x.begin(), x.end());
  const double x_hi = x.empty() ? 1 : std::max(*std::max_element(x.begin(), x.end()), x_lo + 1);
  const double plot_w = kWidth - kLeft - kRight;
  for (size_t p = 0; p < panels.size(); ++p) {
    const PlotPanel& panel = panels[p];
    const double top = kTop + static_cast<double>(p) * (kPanelHeight + kBottom);
    const double bottom = top + kPanelHeight - 20;
    double y_hi = 0;
    for (const PlotSeries& ser : panel.series)
      for (double v : ser.y)
        if (std::isfinite(v)) y_hi = std::max(y_hi, v);
    const double step = tick_step(y_hi > 0 ? y_hi : 1, 5);
    y_hi = std::ceil((y_hi > 0 ? y_hi : 1) / step) * step;
    const auto px = [&](double v) { return kLeft + (v - x_lo) / (x_hi - x_lo) * plot_w; };
    const auto py = [&](double v) { return bottom - v / y_hi * (bottom - top); };
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
        "stroke=\"#444\"/>\n",
        kLeft, top, plot_w, bottom - top);
    for (double v = 0; v <= y_hi + step / 2; v += step)
      s += fmt::format(
          "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{:.1f}\" "
          "y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
          kLeft, kLeft + plot_w, py(v), py(v), kLeft - 6, py(v) + 4, v);
    for (double v : x)
      s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n", px(v),
                       bottom + 16, v);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", kLeft + plot_w / 2,
                     bottom + 32, escape(x_label));
    s += fmt::format(
        "<text transform=\"translate({:.1f},{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
        kLeft - 45, (top + bottom) / 2, escape(panel.y_label));
    for (size_t i = 0; i < panel.series.size(); ++i) {
      const PlotSeries& ser = panel.series[i];
      const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
      std::string points;
      for (size_t j = 0; j < x.size() && j < ser.y.size(); ++j)
        if (std::isfinite(ser.y[j])) points += fmt::format("{:.1f},{:.1f} ", px(x[j]), py(ser.y[j]));
      s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n", color,
                       points);
      const double ly = top + 14 + 18 * static_cast<double>(i);
      s += fmt::format(
          "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
          "stroke-width=\"2\"/><text "
          "x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
          kLeft + plot_w + 12, kLeft + plot_w + 32, ly, ly, color, kLeft + plot_w + 38, ly + 4,
          escape(ser.name));
    }
  }
  s += "</svg>\n";
  return s;
}

}  // namespace df::cli

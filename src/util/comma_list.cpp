#include "util/comma_list.h"

namespace df {

std::vector<std::string> comma_items(std::string_view list) {
  std::vector<std::string> out;
  for (size_t at = 0;;) {
    const size_t comma = list.find(',', at);
    out.emplace_back(list.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
    if (comma == std::string_view::npos) return out;
    at = comma + 1;
  }
}

}  // namespace df

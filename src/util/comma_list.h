#pragma once
// Flag values that list items with commas (--device cuda:0,cuda:1, --gpu-cache 4G,8G, --policies lru,lfu).
#include <string>
#include <string_view>
#include <vector>

namespace df {

// The items between the commas of `list`, in order, empty ones included ("a,,b" is three items, "" one
// empty item): each caller says what an empty item means.
std::vector<std::string> comma_items(std::string_view list);

}  // namespace df

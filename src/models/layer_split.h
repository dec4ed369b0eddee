#pragma once
// One model computed by several devices of one host in contiguous ranges of layers (llama.cpp's default
// layer split): each stage is a model of the same file loaded for its layers only (LoadOptions::first_layer
// and end_layer) on its own backend, with its own experts, weights and per-sequence state; the residual
// stream goes from one stage to the next at the range boundary. Each stage runs exactly the ops the whole
// model runs for its layers, so the output is the bits of one device of the same kind (tested against the
// unsplit model with CPU backends standing in for the devices).
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "models/model.h"

namespace df::gguf {
class File;
}

namespace df::models {

// Contiguous layer ranges [first, end) over n_layer layers, one per share, sized in proportion to the shares
// (llama.cpp's --tensor-split: a device's share of the layers follows its share of the total): boundary i is
// round(n_layer · (share_0 + ... + share_i) / total). df::Error for no share, a negative or non-finite one,
// a zero total, or shares that leave a device without a layer (naming the device and the shares).
std::vector<std::pair<int, int>> split_layers(int n_layer, std::span<const double> shares);
// The same for n items of any kind (split_layers: "layer"; the expert split: "expert"), the errors naming it.
std::vector<std::pair<int, int>> split_items(int n, std::span<const double> shares, std::string_view item);

// Loads one stage per options entry (each with its backend, expert provider and first_layer/end_layer; the
// ranges must follow each other from layer 0 to the last) and joins them. One stage is the model itself.
// df::Error for ranges that leave a gap, overlap or stop short, and for an architecture that cannot be split.
std::unique_ptr<Model> load_layer_split(const gguf::File& file, std::vector<LoadOptions> stages);

}  // namespace df::models

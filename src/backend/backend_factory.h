#pragma once
// The one place that knows which backends exist: the engine (and the model loader's default) asks here for
// the backend a device name (--device) stands for, so that no model or engine code names a concrete backend.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace df::backend {

struct BackendOptions {
  std::string device = "cpu";  // --device: "cpu" (later "cuda[:N]")
  int n_threads = 0;           // CPU threads; <= 0: one per hardware core
};

// The devices this build can run on, in the order --device lists them.
std::vector<std::string> device_names();

// The devices of a --device list: names separated by commas ("cuda:0,cuda:1", "cuda:0,cpu"), "cuda:all"
// standing for every GPU the driver sees. A name may come twice (one GPU standing in for two in tests).
// df::Error for an empty entry or an unknown device, naming it.
std::vector<std::string> device_list(const std::string& spec);

// The backend for options.device. Throws df::Error for an unknown device or one this build or machine
// cannot run, naming what is available.
std::shared_ptr<Backend> make_backend(const BackendOptions& options);

// Scratch floats the device's attention() needs for a cache of n_ctx positions of head_dim, known before
// the backend exists (memory planning).
size_t attention_scratch_floats_for(const BackendOptions& options, int n_ctx, int head_dim);

}  // namespace df::backend

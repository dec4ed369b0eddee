#include "cli/hub_flags.h"

namespace df::cli {

void HubFlags::add(CLI::App* app) {
  app->add_option(
      "--hf-endpoint", endpoint,
      "the Hugging Face hub to download from (default: $HF_ENDPOINT, else https://huggingface.co); "
      "HF_TOKEN in the environment is sent as the bearer token for gated and private repositories");
}

hub::PullOptions pull_options(const HubFlags& flags, PullProgress& progress) {
  hub::PullOptions o;
  o.endpoint = flags.endpoint;
  o.catch_sigint = true;
  o.progress = progress.fn();
  o.on_message = [&progress](const std::string& s) { progress.message(s); };
  return o;
}

}  // namespace df::cli

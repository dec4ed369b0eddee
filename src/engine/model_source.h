#pragma once
// Opens what the user names with -m: a GGUF file (and, from the streaming issue on, an expert store), and
// gives back the model, its tokenizer and its chat template, ready to run.
#include <memory>
#include <optional>
#include <string>

#include "gguf/gguf.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace df {

struct ModelSourceOptions {
  std::string path;        // -m
  int n_threads = 0;       // -t; <= 0: one per core
  int lookahead = 1;       // --lookahead
};

struct OpenedModel {
  std::unique_ptr<gguf::File> file;  // kept open: the trunk and the resident experts were read from it
  std::unique_ptr<models::Model> model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::optional<std::string> chat_template;  // tokenizer.chat_template, if the file has one
};

OpenedModel open_model(const ModelSourceOptions& options);

}  // namespace df

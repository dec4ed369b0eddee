#include "engine/model_source.h"

#include <filesystem>

#include "util/error.h"

namespace df {

OpenedModel open_model(const ModelSourceOptions& options) {
  namespace fs = std::filesystem;
  if (options.path.empty()) fail("no model given: pass -m FILE.gguf");
  std::error_code ec;
  if (!fs::exists(options.path, ec)) fail("model '{}' does not exist", options.path);
  if (fs::is_directory(options.path, ec))
    fail("'{}' is a directory; expert stores are not supported by this build, pass -m FILE.gguf", options.path);
  OpenedModel m;
  m.file = std::make_unique<gguf::File>(gguf::File::open(options.path));
  models::LoadOptions load;
  load.n_threads = options.n_threads;
  load.prefetch_lookahead = options.lookahead;
  m.model = models::load_model(*m.file, load);
  m.tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_gguf(*m.file));
  if (static_cast<int>(m.tokenizer->n_vocab()) != m.model->info().n_vocab)
    fail("{}: the vocabulary has {} tokens but the output layer has {} rows", options.path, m.tokenizer->n_vocab(),
         m.model->info().n_vocab);
  m.chat_template = m.file->get_string("tokenizer.chat_template");
  return m;
}

}  // namespace df

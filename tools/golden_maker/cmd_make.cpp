// ---------------------------------------------------------------------------------------------------------------
// `make`: the driver
// ---------------------------------------------------------------------------------------------------------------

#include <cstdio>
#include <map>

#include "child_process.h"
#include "commands.h"
#include "cpu_paths.h"
#include "fixture_json.h"
#include "llama_util.h"
#include "reference_sections.h"
#include "spread.h"
#include "stats.h"
#include "tolerance.h"

namespace golden_maker {

int cmd_make(const std::string& model_path, const std::string& name, const std::string& out_dir,
             const std::string& texts_path, const std::string& regenerate, const std::string& numerics,
             const std::string& work_arg, bool keep_work, bool reuse, const std::string& ref_cpu) {
  if (!fs::exists(model_path)) {
    fail("no such model file: %s", model_path.c_str());
  }
  if (name.empty() || name.find('/') != std::string::npos) {
    fail("bad NAME '%s' (a file name stem, no slashes)", name.c_str());
  }
  fs::create_directories(out_dir);
  const std::string work = work_arg.empty() ? out_dir + "/" + name + ".work" : work_arg;
  fs::create_directories(work);
  const std::string exe = self_exe();
  const std::string model = fs::absolute(model_path).string();

  // 1. text: tokenizer, chat, prompt ids, model description
  const std::string text_json = work + "/text.json";
  if (!(reuse && fs::exists(text_json))) {
    run_child({exe, "text", "--model", model, "--texts", texts_path, "--out", text_json}, work + "/text.log");
  }
  const json text = read_json(text_json);

  // 2. the reference path: generations, the teacher-forced and layers prompts, and the extended sequences
  json gen_jobs = json::array();
  for (const char* s : kSeqs) {
    gen_jobs.push_back({{"name", s}, {"prompt", text.at("prompt_ids").at(s)}, {"n_predict", kNPredict}});
  }
  auto run_path = [&](const PathDef& p, const json& jobs) {
    const std::string dir = work + "/" + p.key;
    if (reuse && fs::exists(dir + "/run.json")) {
      return;
    }
    fs::create_directories(dir);
    write_json(dir + "/jobs.json", jobs);
    std::vector<std::string> args = {exe,         "run",
                                     "--model",   model,
                                     "--jobs",    dir + "/jobs.json",
                                     "--out",     dir,
                                     "--backend", std::string(p.backend) == "ref" ? ref_cpu : p.backend,
                                     "--threads", std::to_string(p.threads)};
    if (p.no_repack) {
      args.push_back("--no-repack");
    }
    run_child(args, dir + "/run.log");
  };
  {
    json jobs;
    jobs["gen"] = gen_jobs;
    json tf = json::array();
    // n_ctx = prompt + n_predict + 16, as for a generation from that prompt
    tf.push_back({{"name", "teacher_forced"}, {"tokens", text.at("prompt_ids").at("medium")}});
    tf.push_back({{"name", "layers"}, {"tokens", text.at("prompt_ids").at("short")}});
    for (const char* s : kSeqs) {
      const int P = (int)text.at("prompt_ids").at(s).size();
      tf.push_back({{"name", std::string("ext_") + s},
                    {"extend_gen", s},
                    {"extend", kExtend},
                    {"n_ctx", P + kNPredict + 16}});
    }
    jobs["tf"] = tf;
    run_path(kRef, jobs);
  }
  const std::string ref_dir = work + "/reference";
  const json ref = read_json(ref_dir + "/run.json");

  // 3. the other CPU paths on the reference's token sequences
  {
    json jobs;
    jobs["gen"] = gen_jobs;
    json tf = json::array();
    for (const char* s : kSeqs) {
      const int P = (int)text.at("prompt_ids").at(s).size();
      tf.push_back({{"name", std::string("ext_") + s},
                    {"tokens", ref.at("tf").at(std::string("ext_") + s).at("tokens")},
                    {"n_ctx", P + kNPredict + 16}});
    }
    jobs["tf"] = tf;
    for (const auto& p : kPaths) {
      run_path(p, jobs);
    }
  }

  // 4. the fixture
  const int V = ref.at("n_vocab");
  const json& tm = text.at("model");
  json doc;
  doc["schema"] = "diskformer-golden/1";
  json model_j = tm;
  model_j.erase("gguf_metadata");
  if (!regenerate.empty()) {
    model_j["regenerate"] = regenerate;
  }
  if (!numerics.empty()) {
    try {
      model_j["numerics"] = json::parse(numerics);
    } catch (const json::exception& e) {
      fail("--numerics is not JSON: %s", e.what());
    }
  }

  const TfData tfd = load_tf(ref_dir, ref, "teacher_forced");
  const TfData lay = load_tf(ref_dir, ref, "layers");
  if (tfd.moe_layers.empty()) {
    fail("llama.cpp's graph shows no ffn_moe_topk-N tensor: not a MoE model?");
  }
  // n_dense_lead: leading_dense_block_count where the GGUF has it, else the layers before the first MoE layer
  if (model_j["shape"]["n_dense_lead"].is_null()) {
    model_j["shape"]["n_dense_lead"] = tfd.moe_layers.front();
  }
  model_j["gguf_metadata"] = tm.at("gguf_metadata");
  doc["model"] = model_j;

  const std::string variant = ref.at("cpu_variant");
  json reference;
  reference["engine"] = "llama.cpp";
  reference["llama_cpp_release"] =
      "v0.4.0 (ggml-org/llama.cpp tag, source commit 80fb11ac73e66d89eae2c6a91d8a77428fa733ed)";
  reference["distribution"] =
      "node-llama-cpp 3.21.1 prebuilt @node-llama-cpp/linux-x64 3.21.1 "
      "(libllama.v0.4.0.so, libllama-common.so)";
  reference["backend"] = ref_cpu == "auto" ? "CPU only (ggml_backend_load_all picked " + variant + ")"
                                           : "CPU only (" + variant +
                                                 ", loaded by name: the variant the "
                                                 "shipped fixtures were made with)";
  reference["threads"] = 1;
  reference["weights"] = "mmap, default weight repacking (use_extra_bufts = true)";
  reference["attention"] = "flash attention off";
  reference["sampling"] = "greedy: argmax of the raw logits, lowest id wins exact ties";
  reference["system_info"] = ref.at("system_info");
  doc["reference"] = reference;
  doc["tokenizer"] = text.at("tokenizer");
  doc["chat"] = text.at("chat");
  doc["prompts"] = text.at("prompts");

  // --- generation ---
  const ReferenceGenerations generations = generation_section(ref_dir, ref, text.at("prompt_ids"), V);
  doc["generation"] = generations.section;

  // --- spread: the other paths against the reference on the extended sequences ---
  std::map<std::string, TfData> ref_ext;
  for (const char* s : kSeqs) {
    ref_ext[s] = load_tf(ref_dir, ref, std::string("ext_") + s);
  }
  const PathSpread paths = measure_paths(work, ref, ref_ext, generations.step_margin, V);
  const DecodeVsBatched decode_vs_batched =
      measure_decode_vs_batched(text.at("prompt_ids"), ref_ext, generations.logits, V);
  const Tolerances tolerances = derive_tolerances(paths, decode_vs_batched);

  doc["teacher_forced"] = teacher_forced_section(tfd, V, tolerances, out_dir, name);
  doc["layers"] = layers_section(lay, tolerances, out_dir, name);
  doc["spread"] = spread_section(paths, decode_vs_batched, ref.at("system_info"));
  doc["tolerance"] = tolerance_section(tolerances, paths, generations.step_margin, tfd.score_names);

  write_json(out_dir + "/" + name + ".json", doc);
  if (!keep_work) {
    fs::remove_all(work);
  }
  fprintf(stderr, "golden_maker: wrote %s/%s.{json,tf_logits.f32,l_out.f32,topk.f32} (reference on %s)\n",
          out_dir.c_str(), name.c_str(), variant.c_str());
  return 0;
}

}  // namespace golden_maker

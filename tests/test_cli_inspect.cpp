// `diskformer inspect`: the JSON report's numbers agree with what the GGUF reader and the golden JSON say,
// independently computed here; the human table shows the same; unknown architectures and bad files are
// handled.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_run.h"
#include "gguf/gguf.h"
#include "golden_json.h"

namespace fs = std::filesystem;
using df::gguf::File;
using df::testing::golden_json;
using df::testing::golden_path;
using df::testing::run_cli;
using df::testing::run_cli_stdout;
using json = nlohmann::json;

namespace {

const char* kGoldenModels[] = {"lfm2moe-tiny", "lfm2moe-medium", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                               "gpt-oss-tiny"};

json inspect_json(const std::string& path) {
  const auto r = run_cli_stdout("inspect --json '" + path + "'");
  EXPECT_EQ(r.status, 0) << r.out;
  return json::parse(r.out);
}

// What the store streams: blk.N.ffn_*_exps.weight; per-expert biases (gpt-oss) stay resident.
bool is_expert_tensor(const std::string& name) {
  return name.rfind("blk.", 0) == 0 && name.ends_with("_exps.weight");
}

}  // namespace

TEST(CliInspect, JsonAgreesWithTheReaderOnEveryGoldenModel) {
  for (const char* model : kGoldenModels) {
    SCOPED_TRACE(model);
    const std::string path = golden_path(std::string(model) + ".gguf");
    const json r = inspect_json(path);
    const File f = File::open(path);
    const json g = golden_json(model)["model"];

    EXPECT_EQ(r["file_bytes"].get<uint64_t>(), fs::file_size(path));
    EXPECT_EQ(r["file_bytes"].get<uint64_t>(), g["bytes"].get<uint64_t>());
    EXPECT_EQ(r["architecture"], g["arch"]);
    EXPECT_EQ(r["hyperparameters"]["block_count"], g["shape"]["n_layer"]);
    EXPECT_EQ(r["hyperparameters"]["embedding_length"], g["shape"]["n_embd"]);
    EXPECT_EQ(r["tokenizer"]["n_tokens"], g["n_vocab"]);
    EXPECT_EQ(r["tokenizer"]["bos"]["id"], golden_json(model)["tokenizer"]["bos_id"]);
    EXPECT_EQ(r["tokenizer"]["eos"]["id"], golden_json(model)["tokenizer"]["eos_id"]);
    EXPECT_EQ(r["tokenizer"]["add_bos"], golden_json(model)["tokenizer"]["add_bos"]);
    for (const auto& [text, id] : g["special_ids"].items()) {
      bool found = false;
      for (const auto& s : r["tokenizer"]["special_tokens"]) found |= s["id"] == id && s["text"] == text;
      EXPECT_TRUE(found) << text;
    }

    // Tensor table: same names, types, shapes, sizes, in file order.
    ASSERT_EQ(r["tensors"].size(), f.tensors().size());
    uint64_t expert = 0, other = 0;
    std::set<std::string> moe_layers;
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const auto& t = f.tensors()[i];
      const json& j = r["tensors"][i];
      EXPECT_EQ(j["name"], t.name);
      EXPECT_EQ(j["type"], std::string(df::ggml_type_name(t.type)));
      EXPECT_EQ(j["bytes"].get<uint64_t>(), t.nbytes);
      std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
      EXPECT_EQ(j["shape"].get<std::vector<int64_t>>(), shape);
      EXPECT_EQ(j["routed_expert"].get<bool>(), is_expert_tensor(t.name)) << t.name;
      if (is_expert_tensor(t.name)) {
        expert += t.nbytes;
        moe_layers.insert(t.name.substr(0, t.name.find('.', 4)));
      } else {
        other += t.nbytes;
      }
    }
    const json& m = r["memory"];
    EXPECT_EQ(m["routed_expert_bytes"].get<uint64_t>(), expert);
    EXPECT_EQ(m["other_bytes"].get<uint64_t>(), other);
    EXPECT_EQ(r["totals"]["tensor_bytes"].get<uint64_t>(), expert + other);
    EXPECT_NEAR(m["routed_expert_fraction"].get<double>(), double(expert) / double(expert + other), 1e-12);
    EXPECT_EQ(m["n_moe_layers"].get<size_t>(), moe_layers.size());
    EXPECT_EQ(m["n_moe_layers"].get<size_t>(), golden_json(model)["teacher_forced"]["moe_layers"].size());
    const uint64_t n_expert = g["shape"]["n_expert"], k = g["shape"]["n_expert_used"];
    EXPECT_EQ(m["bytes_per_expert"].get<uint64_t>() * moe_layers.size() * n_expert, expert);
    EXPECT_EQ(m["active_expert_bytes_per_token"].get<uint64_t>(), expert / n_expert * k);
    EXPECT_EQ(m["resident_estimate_bytes"].get<uint64_t>(), other + expert / n_expert * k);
    uint64_t by_type = 0;
    for (const auto& [type, bytes] : r["bytes_by_type"].items()) by_type += bytes.get<uint64_t>();
    EXPECT_EQ(by_type, expert + other);
  }
}

TEST(CliInspect, HumanTableShowsTheSameFacts) {
  const std::string path = golden_path("gpt-oss-tiny.gguf");
  const auto r = run_cli("inspect '" + path + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  const File f = File::open(path);
  for (const auto& t : f.tensors()) EXPECT_NE(r.out.find(t.name), std::string::npos) << t.name;
  for (const char* s : {"gpt-oss", "MXFP4", "sliding_window", "routed experts", "everything else",
                        "pre gpt-4o", "<|return|>", "estimated resident memory"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

TEST(CliInspect, UnknownArchitectureIsShownGenerically) {
  fs::create_directories(DF_TEST_TMP);
  const std::string path = std::string(DF_TEST_TMP) + "/inspect_mystery.gguf";
  df::gguf::Writer w;
  w.set("general.architecture", df::gguf::Value::of_string("mystery"));
  w.set("mystery.block_count", df::gguf::Value::of_u32(1));
  w.set("some.other.key", df::gguf::Value::of_f32s(std::vector<float>(100, 0.5f)));
  w.add_tensor({"token_embd.weight", df::GgmlType::F32, {8, 4}});
  w.add_tensor({"blk.0.ffn_up_exps.weight", df::GgmlType::Q8_0, {32, 2, 3}});
  w.add_tensor({"blk.0.ffn_up_shexp.weight", df::GgmlType::F16, {8, 2}});
  w.write(path, [](size_t, std::span<uint8_t> out) { std::fill(out.begin(), out.end(), uint8_t{0}); });

  const json r = inspect_json(path);
  EXPECT_EQ(r["architecture"], "mystery");
  EXPECT_EQ(r["hyperparameters"]["block_count"], 1);
  EXPECT_EQ(r["other_metadata"]["some.other.key"]["length"], 100);  // long arrays are summarised
  EXPECT_EQ(r["tokenizer"]["n_tokens"], 0);
  const json& m = r["memory"];
  EXPECT_EQ(m["routed_expert_bytes"].get<uint64_t>(), 2u * 3u * 34u);
  EXPECT_EQ(m["other_bytes"].get<uint64_t>(), 8u * 4u * 4u + 8u * 2u * 2u);  // a shared expert stays resident
  EXPECT_EQ(m["n_expert"], 3);  // from the tensor shape: no expert_count key
  EXPECT_FALSE(m.contains("active_expert_bytes_per_token"));
  const auto human = run_cli("inspect '" + path + "'");
  EXPECT_EQ(human.status, 0) << human.out;
  EXPECT_NE(human.out.find("blk.0.ffn_up_exps.weight"), std::string::npos);
}

TEST(CliInspect, BadInputFailsWithAMessage) {
  auto r = run_cli("inspect /nonexistent/model.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent/model.gguf"), std::string::npos) << r.out;
  fs::create_directories(DF_TEST_TMP);
  const std::string junk = std::string(DF_TEST_TMP) + "/inspect_junk.gguf";
  {
    std::ofstream f(junk, std::ios::binary);
    f << "this is not a gguf file at all";
  }
  r = run_cli("inspect --json '" + junk + "'");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("error"), std::string::npos) << r.out;
  r = run_cli("inspect");
  EXPECT_NE(r.status, 0);
}

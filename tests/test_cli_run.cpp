#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_run.h"
#include "gguf/gguf.h"
#include "golden_json.h"

using df::testing::golden_json;
using df::testing::golden_path;
using df::testing::join;
using df::testing::parse_ids;
using df::testing::run_cli;
using df::testing::run_cli_stdout;

// The F16 golden model allows exact ids (golden README, rule 4): greedy generation through the CLI machine
// mode, with the default prefill chunking, must reproduce llama.cpp's 32 ids for every prompt.
TEST(CliRun, GreedyIdsEqualLlamaCppOnTheF16Model) {
  auto j = golden_json("lfm2moe-tiny-f16");
  for (const auto& g : j["generation"]) {
    SCOPED_TRACE(g["name"].get<std::string>());
    auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    auto r = run_cli_stdout("run -m " + golden_path("lfm2moe-tiny-f16.gguf") + " --prompt-ids " +
                            join(prompt, ",") + " -n 32 --temp 0 --ignore-eos --print-ids -t 2");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(parse_ids(r.out), g["generated_ids"].get<std::vector<int32_t>>());
  }
}

TEST(CliRun, TextPromptStreamsText) {
  const std::string args =
      "run -m " + golden_path("lfm2moe-tiny.gguf") + " -p 'Hello world' -n 8 --temp 0.7 --seed 3";
  auto r = run_cli_stdout(args);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("Hello world", 0), 0u) << r.out;  // the prompt is echoed first
  EXPECT_GT(r.out.size(), std::string("Hello world").size());
  auto with_stats = run_cli(args);
  EXPECT_NE(with_stats.out.find("tok/s"), std::string::npos) << with_stats.out;
  auto again = run_cli_stdout(args);
  EXPECT_EQ(r.out, again.out);  // same seed, same text
}

// --chat renders -p (and --system) through the GGUF's template exactly as llama.cpp does: the prompt ids
// equal the golden chat cases', and generation starts from them (the ids produced equal those of the same
// prompt given as ids).
TEST(CliRun, ChatModeRendersTheTemplate) {
  for (const char* model :
       {"lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"}) {
    const auto j = golden_json(model);
    for (const auto& c : j["chat"]["cases"]) {
      const std::string name = c["name"];
      if (name != "single_user" && name != "system_user") continue;
      SCOPED_TRACE(std::string(model) + " " + name);
      const auto& msgs = c["messages"];
      std::string args = "run -m " + golden_path(std::string(model) + ".gguf") +
                         " --chat -n 4 --temp 0 --ignore-eos --print-ids";
      if (name == "system_user") args += " --system '" + msgs[0]["content"].get<std::string>() + "'";
      args += " -p '" + msgs[msgs.size() - 1]["content"].get<std::string>() + "'";
      auto r = df::testing::run_cli_split(args + " --verbose-prompt");
      ASSERT_EQ(r.status, 0) << r.err;
      const auto want = c["prompt_ids"].get<std::vector<int32_t>>();
      EXPECT_NE(r.err.find("prompt: " + std::to_string(want.size()) + " tokens: " + join(want, " ") + "\n"),
                std::string::npos)
          << r.err;
      auto as_ids = run_cli_stdout("run -m " + golden_path(std::string(model) + ".gguf") + " --prompt-ids " +
                                   join(want, ",") + " -n 4 --temp 0 --ignore-eos --print-ids");
      ASSERT_EQ(as_ids.status, 0);
      EXPECT_EQ(parse_ids(r.out), parse_ids(as_ids.out));
      EXPECT_EQ(parse_ids(r.out).size(), 4u);
    }
  }
}

TEST(CliRun, BadInputsFailWithClearMessages) {
  struct Case {
    std::string args, expect;
  };
  const std::string tiny = golden_path("lfm2moe-tiny.gguf");
  std::filesystem::create_directories(DF_TEST_TMP);
  const std::string other = std::string(DF_TEST_TMP) + "/other-arch.gguf";
  {
    df::gguf::Writer w;
    w.set("general.architecture", df::gguf::Value::of_string("mamba"));
    w.add_tensor({"token_embd.weight", df::GgmlType::F32, {8, 4}});
    w.write(other, [](size_t, std::span<uint8_t> b) { std::fill(b.begin(), b.end(), 0); });
  }
  std::vector<Case> cases = {
      {"run --resident -m " + other + " -p hi", "unsupported architecture 'mamba'"},
      {"run -m /nonexistent.gguf -p hi", "does not exist"},
      {"run -m " + tiny + " -c 4 --prompt-ids 1,2,3,4,5,6", "context"},
      {"run -m " + tiny + " --prompt-ids 1,2,999999", "outside the vocabulary"},
      {"run -m " + tiny + " -p \"$(printf 'bad \\377 utf8')\"", "UTF-8"},
      {"run -m " + tiny, "exactly one of"},
      {"run -m " + tiny + " -p hi --top-p 0", "top-p"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    auto r = run_cli(c.args);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
  }
}

// --dump-layers writes the residual stream after every layer; for the golden 8-token prompt (one batch) it
// must agree with llama.cpp's l_out within the per-layer tolerance of the golden README.
TEST(CliRun, DumpLayersMatchesTheGoldenResiduals) {
  namespace fs = std::filesystem;
  auto j = golden_json("lfm2moe-tiny-f16");
  auto prompt = j["generation"][0]["prompt_ids"].get<std::vector<int32_t>>();
  std::string dir = std::string(DF_TEST_TMP) + "/dump";
  fs::remove_all(dir);
  auto r = run_cli("run -m " + golden_path("lfm2moe-tiny-f16.gguf") + " --prompt-ids " + join(prompt, ",") +
                   " -n 1 --temp 0 --print-ids --dump-layers " + dir);
  ASSERT_EQ(r.status, 0) << r.out;
  const int n_layer = j["model"]["shape"]["n_layer"], n_embd = j["model"]["shape"]["n_embd"];
  const size_t n = static_cast<size_t>(n_layer) * prompt.size() * static_cast<size_t>(n_embd);
  std::vector<float> got(n), ref(n);
  std::ifstream(dir + "/step-0000.f32", std::ios::binary).read(reinterpret_cast<char*>(got.data()), n * 4);
  std::ifstream(golden_path("lfm2moe-tiny-f16.l_out.f32"), std::ios::binary)
      .read(reinterpret_cast<char*>(ref.data()), n * 4);
  ASSERT_EQ(fs::file_size(dir + "/step-0000.f32"), n * 4);
  auto tol = j["tolerance"]["l_out_rel_l2"].get<std::vector<double>>();
  const size_t per_layer = prompt.size() * static_cast<size_t>(n_embd);
  for (int l = 0; l < n_layer; ++l) {
    double num = 0, den = 0;
    for (size_t i = 0; i < per_layer; ++i) {
      double d = got[l * per_layer + i] - ref[l * per_layer + i];
      num += d * d;
      den += double(ref[l * per_layer + i]) * ref[l * per_layer + i];
    }
    EXPECT_LE(std::sqrt(num / den), tol[static_cast<size_t>(l)]) << "layer " << l;
  }
  EXPECT_TRUE(fs::exists(dir + "/index.json"));
}

// Real chat templates (Qwen3, LFM2.5, Llama 3.3, gpt-oss, Gemma 4, DeepSeek-R1-Distill) rendered for a set of
// conversations must equal, byte for byte, what an independent implementation (@huggingface/jinja, through
// tools/templates/render_expected.cjs) produced, adjusted where llama.cpp differs from it (cases.json lists
// why).
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/jinja.h"
#include "util/error.h"

namespace df::jinja {
namespace {

using json = nlohmann::ordered_json;

const std::filesystem::path kDir = std::filesystem::path(__FILE__).parent_path() / "data" / "templates";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const std::filesystem::path& p) { return json::parse(read_file(p)); }

TEST(JinjaRealTemplatesTest, MatchIndependentRenderings) {
  setenv("TZ", "UTC", 1);  // the expectations pin strftime_now to cases.now in UTC
  tzset();
  const json cases = read_json(kDir / "cases.json");
  const json manifest = read_json(kDir / "expected.json");
  RenderOptions options;
  options.now = cases.at("now").get<std::time_t>();

  size_t checked = 0;
  for (const json& pair : manifest.at("pairs")) {
    const std::string tname = pair.at("template");
    const std::string cname = pair.at("conversation");
    SCOPED_TRACE(tname + " / " + cname);
    ASSERT_TRUE(pair.contains("expected")) << "the reference renderer failed: " << pair.value("error", "");
    const json& t = cases.at("templates").at(tname);
    const json& c = cases.at("conversations").at(cname);
    json context = {{"messages", c.at("messages")},
                    {"bos_token", t.at("bos_token")},
                    {"eos_token", t.at("eos_token")},
                    {"add_generation_prompt", c.at("add_generation_prompt")},
                    {"enable_thinking", c.at("enable_thinking")}};
    if (c.contains("tools")) context["tools"] = c.at("tools");
    const Template tmpl(read_file(kDir / t.at("file").get<std::string>()), tname);
    const std::string expected = read_file(kDir / pair.at("expected").get<std::string>());
    std::string got;
    try {
      got = tmpl.render(context, options);
    } catch (const df::Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(got, expected);
    ++checked;
  }
  EXPECT_EQ(checked, 54u) << "every template x conversation pair of cases.json is expected to render";
}

TEST(JinjaRealTemplatesTest, TemplateRaisesWhereTheModelRequiresIt) {
  // gpt-oss refuses channel markup in content; the error carries the template's own message and position.
  const Template tmpl(read_file(kDir / "gpt-oss-120b.jinja"), "gpt-oss");
  const json context = {{"messages",
                         {{{"role", "user"}, {"content", "hi"}},
                          {{"role", "assistant"}, {"content", "<|channel|>analysis<|message|>x"}},
                          {{"role", "user"}, {"content", "again"}}}},
                        {"add_generation_prompt", true}};
  try {
    tmpl.render(context);
    FAIL() << "expected raise_exception";
  } catch (const df::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("raise_exception()"), std::string::npos) << m;
    EXPECT_NE(m.find("line 265, column 21"), std::string::npos) << m;
    EXPECT_NE(m.find("You have passed a message containing <|channel|> tags"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace df::jinja

// The Gemma 4 tokenizer (tokenizer.ggml.model = gemma4, ARCHITECTURES.md 4.4, 9.5): first the rules on small
// hand-built vocabularies, then everything llama.cpp produced for the synthetic Gemma 4 vocabularies in
// tests/data/tokenizer/gemma4_cases.json (made by llama.cpp v0.4.0 on vocabulary-only GGUFs of
// df::synth::build_gemma4_vocab; test_synth_gemma4_vocab checks that the builder still makes those
// vocabularies): ids with add_special / parse_special both ways, detokenization with remove_special /
// unparse_special both ways, every token's piece and attributes, the end-of-generation set, and the chat
// template as llama.cpp's common_chat_templates_apply renders it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "error_matchers.h"
#include "gguf/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using df::tok::TokenId;
using df::tok::Tokenizer;
using df::tok::TokenType;
using df::tok::Vocab;
using df::tok::VocabSpec;
using json = nlohmann::json;

constexpr int32_t kNormal = static_cast<int32_t>(TokenType::kNormal);
constexpr int32_t kControl = static_cast<int32_t>(TokenType::kControl);
constexpr int32_t kUserDefined = static_cast<int32_t>(TokenType::kUserDefined);
constexpr int32_t kByte = static_cast<int32_t>(TokenType::kByte);

// <pad> <eos> <bos> <unk>, the 256 <0xXX> byte tokens (ids 4-259), then `extra` normal tokens.
VocabSpec small_vocab(std::vector<std::pair<std::string, int32_t>> extra, std::vector<std::string> merges) {
  VocabSpec spec;
  spec.model = "gemma4";
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>"}) {
    spec.tokens.push_back(s);
    spec.token_types.push_back(kControl);
  }
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(fmt::format("<0x{:02X}>", b));
    spec.token_types.push_back(kByte);
  }
  for (auto& [text, type] : extra) {
    spec.tokens.push_back(text);
    spec.token_types.push_back(type);
  }
  spec.merges = std::move(merges);
  spec.bos = 2;
  spec.eos = 1;
  spec.pad = 0;
  spec.unk = 3;
  return spec;
}

Tokenizer make(VocabSpec spec) { return Tokenizer(Vocab::build(std::move(spec))); }

TokenId byte_id(uint8_t b) { return 4 + b; }

TokenId id_of(const Tokenizer& t, const std::string& text) {
  const auto id = t.token_id(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

const std::string kSpace = "\u2581";  // ▁

TEST(Gemma4Tokenizer, SpacesAreEscapedAndMergedAcrossWords) {
  // No word-level pre-split: "▁" joins the letters around it when merges say so.
  const auto t = make(small_vocab({{"a", kNormal},
                                   {"b", kNormal},
                                   {kSpace, kNormal},
                                   {"a" + kSpace, kNormal},
                                   {"a" + kSpace + "b", kNormal}},
                                  {"a " + kSpace, "a" + kSpace + " b"}));
  EXPECT_EQ(t.encode("a b", false, false), std::vector<TokenId>{id_of(t, "a" + kSpace + "b")});
  EXPECT_EQ(t.encode(" a", false, false), (std::vector<TokenId>{id_of(t, kSpace), id_of(t, "a")}));
  // No space prefix is added, and decoding turns ▁ back into spaces.
  EXPECT_EQ(t.decode(t.encode("a b  a", false, false)), "a b  a");
}

TEST(Gemma4Tokenizer, BosIsAlwaysAddedWhateverTheFileSays) {
  auto spec = small_vocab({{"a", kNormal}}, {"a a"});
  spec.add_bos = false;
  const auto t = make(spec);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_EQ(t.encode("a", true, false), (std::vector<TokenId>{2, id_of(t, "a")}));
  EXPECT_EQ(t.encode("", true, false), std::vector<TokenId>{2});
  // A BOS in the text (parse_special) comes on top of the added one, as in llama.cpp.
  EXPECT_EQ(t.encode("<bos>a", true, true), (std::vector<TokenId>{2, 2, id_of(t, "a")}));
  // remove_special drops only the first BOS.
  EXPECT_EQ(t.decode(std::vector<TokenId>{2, 2, id_of(t, "a")}, true, true), "<bos>a");
}

TEST(Gemma4Tokenizer, NewlineRunsThatAreTokensAreEmittedWhole) {
  // "\n\n\n" is a token that no merge builds: llama.cpp's Gemma 4 rule emits it whole anyway; a run that is
  // no token is merged as usual ("\n \n"), and newlines never merge with other text.
  const auto t =
      make(small_vocab({{"\n", kNormal}, {"\n\n", kNormal}, {"\n\n\n", kNormal}, {"x", kNormal}}, {"\n \n"}));
  const TokenId n1 = id_of(t, "\n"), n2 = id_of(t, "\n\n"), n3 = id_of(t, "\n\n\n"), x = id_of(t, "x");
  EXPECT_EQ(t.encode("\n\n\n", false, false), std::vector<TokenId>{n3});
  EXPECT_EQ(t.encode("\n\n\n\n\n", false, false), (std::vector<TokenId>{n2, n2, n1}));
  EXPECT_EQ(t.encode("x\n\n\nx\n", false, false), (std::vector<TokenId>{x, n3, x, n1}));
}

TEST(Gemma4Tokenizer, PiecesOutsideTheVocabularyFallBackToByteTokens) {
  // "é" is no token: its UTF-8 bytes become <0xC3> <0xA9>. A merge result that is no token falls back the
  // same way, and a byte without a byte token is dropped.
  const auto t = make(small_vocab({{"a", kNormal}, {"b", kNormal}}, {"a b"}));
  EXPECT_EQ(t.encode("\xc3\xa9", false, false), (std::vector<TokenId>{byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(t.encode("ab", false, false), (std::vector<TokenId>{byte_id('a'), byte_id('b')}));
  EXPECT_EQ(t.decode(std::vector<TokenId>{byte_id(0xC3), byte_id(0xA9)}), "\xc3\xa9");

  auto spec = small_vocab({{"a", kNormal}}, {"a a"});
  spec.tokens[byte_id(0xA9)] = "<0xa9>";  // lower-case hex is not what llama.cpp looks up
  spec.token_types[byte_id(0xA9)] = kNormal;
  const auto u = make(spec);
  EXPECT_EQ(u.encode("\xc3\xa9", false, false), std::vector<TokenId>{byte_id(0xC3)});
}

TEST(Gemma4Tokenizer, VisibleMarkersAreMatchedInTextControlTokensOnlyWhenParsingSpecials) {
  // The converter makes <|channel> user-defined (always matched, always rendered) and <|turn> control. The
  // end-of-generation marker <|tool_response> is user-defined in the file, but llama.cpp adds the control
  // attribute to every EOG text, so it behaves as a control token.
  const auto t = make(small_vocab({{"<|turn>", kControl},
                                   {"<|channel>", kUserDefined},
                                   {"<|tool_response>", kUserDefined},
                                   {"x", kNormal}},
                                  {"x x"}));
  const TokenId turn = id_of(t, "<|turn>"), channel = id_of(t, "<|channel>"), x = id_of(t, "x");
  const TokenId response = id_of(t, "<|tool_response>");
  EXPECT_EQ(t.encode("x<|channel>x", false, false), (std::vector<TokenId>{x, channel, x}));
  EXPECT_EQ(t.encode("<|turn>x", false, true), (std::vector<TokenId>{turn, x}));
  EXPECT_NE(t.encode("<|turn>x", false, false).front(), turn);
  EXPECT_NE(t.encode("<|tool_response>", false, false).front(), response);
  EXPECT_EQ(t.encode("<|tool_response>", false, true), std::vector<TokenId>{response});

  EXPECT_EQ(t.token_to_piece(channel, false), "<|channel>");
  EXPECT_EQ(t.token_to_piece(turn, false), "");
  EXPECT_EQ(t.token_to_piece(response, false), "");
  EXPECT_EQ(t.decode(std::vector<TokenId>{turn, x, channel}), "x<|channel>");
  EXPECT_EQ(t.decode(std::vector<TokenId>{turn, x, channel}, false, true), "<|turn>x<|channel>");
}

TEST(Gemma4Tokenizer, EndOfGenerationSet) {
  const auto t = make(
      small_vocab({{"<turn|>", kControl}, {"<|tool_response>", kUserDefined}, {"</s>", kControl}}, {"a a"}));
  EXPECT_TRUE(t.is_eog(1));  // <eos>
  EXPECT_TRUE(t.is_eog(id_of(t, "<turn|>")));
  EXPECT_TRUE(t.is_eog(id_of(t, "<|tool_response>")));
  // </s> is an end of generation in other vocabularies, not in one with <|tool_response>.
  EXPECT_FALSE(t.is_eog(id_of(t, "</s>")));
  EXPECT_EQ(t.vocab().eog_ids().size(), 3u);
}

TEST(Gemma4Tokenizer, ByteTokensDecodeAsLlamaCppReadsThem) {
  // llama.cpp reads the two characters after "<0x" with strtol(16); whatever they are.
  auto spec =
      small_vocab({{"<0x7>", kByte}, {"<0x-1>", kByte}, {"<0x zz>", kByte}, {"<0xG1>", kByte}}, {"a a"});
  const auto t = make(spec);
  EXPECT_EQ(t.token_to_piece(id_of(t, "<0x41>")), "A");
  EXPECT_EQ(t.token_to_piece(id_of(t, "<0x7>")), "\x07");
  EXPECT_EQ(t.token_to_piece(id_of(t, "<0x-1>")), "\xff");
  EXPECT_EQ(t.token_to_piece(id_of(t, "<0x zz>")), std::string(1, '\0'));
  EXPECT_EQ(t.token_to_piece(id_of(t, "<0xG1>")), std::string(1, '\0'));
}

TEST(Gemma4Tokenizer, AddSpacePrefixDropsOneLeadingSpaceWhenDecoding) {
  auto spec = small_vocab({{kSpace + kSpace + "a", kNormal}}, {"a a"});
  spec.add_space_prefix = true;
  const auto t = make(spec);
  const TokenId a = id_of(t, kSpace + kSpace + "a");
  EXPECT_EQ(t.decode(std::vector<TokenId>{a, a}), " a  a");
  EXPECT_EQ(t.decode(std::vector<TokenId>{2, a}, true), "  a");  // a removed BOS keeps the space
  EXPECT_EQ(t.decode(std::vector<TokenId>{2, a}, false),
            "  a");  // so does a kept one (it is the first piece)
}

TEST(Gemma4Tokenizer, ThePreTokenizerKeyIsIgnoredAndDefaultsAreNone) {
  auto spec = small_vocab({{"a", kNormal}}, {"a a"});
  spec.pre = "qwen2";
  spec.eos.reset();
  const auto t = make(spec);
  EXPECT_EQ(t.vocab().pre_name(), "gemma4");
  EXPECT_EQ(t.eos(), df::tok::kNoToken);  // no gpt2-style default of 11
}

TEST(Gemma4Tokenizer, MalformedMetadataIsRefusedWithAClearMessage) {
  using df::testing::expect_error;
  auto no_bos = small_vocab({{"a", kNormal}}, {"a a"});
  no_bos.bos.reset();
  expect_error([&] { Vocab::build(no_bos); }, {"bos_token_id is missing", "always starts with BOS"});
  auto no_merges = small_vocab({{"a", kNormal}}, {});
  expect_error([&] { Vocab::build(no_merges); }, {"tokenizer.ggml.merges", "SentencePiece-style BPE"});
  auto bad_byte = small_vocab({{"<0", kByte}}, {"a a"});
  expect_error([&] { Vocab::build(bad_byte); }, {"byte token 260", "<0xXX>"});
  auto other_model = small_vocab({{"a", kNormal}}, {"a a"});
  other_model.model = "llama";
  expect_error([&] { Vocab::build(other_model); }, {"'llama'", "'gemma4'"});
  auto bad_merge = small_vocab({{"a", kNormal}}, {"ab"});
  expect_error([&] { Vocab::build(bad_merge); }, {"malformed BPE merge #0 'ab'"});

  // Scores are unused, but llama.cpp refuses a file whose scores are not numbers or too few.
  using df::gguf::Value;
  const auto write = [&](const std::string& name, Value scores) {
    const auto spec = small_vocab({{"a", kNormal}}, {"a a"});
    df::gguf::Writer w;
    w.set("tokenizer.ggml.model", Value::of_string("gemma4"));
    w.set("tokenizer.ggml.tokens", Value::of_strings(spec.tokens));
    w.set("tokenizer.ggml.scores", std::move(scores));
    w.set("tokenizer.ggml.token_type", Value::of_i32s(spec.token_types));
    w.set("tokenizer.ggml.merges", Value::of_strings(spec.merges));
    w.set("tokenizer.ggml.bos_token_id", Value::of_u32(2));
    std::filesystem::create_directories(DF_TEST_TMP);
    const std::string path = std::string(DF_TEST_TMP) + "/" + name;
    w.write(path, std::vector<std::vector<uint8_t>>{});
    return path;
  };
  const auto n = small_vocab({{"a", kNormal}}, {"a a"}).tokens.size();
  const std::string strings =
      write("scores_strings.gguf", Value::of_strings(std::vector<std::string>(n, "x")));
  expect_error([&] { Vocab::from_gguf(df::gguf::File::open(strings)); },
               {"tokenizer.ggml.scores", "float32"});
  const std::string short_scores =
      write("scores_short.gguf", Value::of_f32s(std::vector<float>(n - 1, 0.0f)));
  expect_error([&] { Vocab::from_gguf(df::gguf::File::open(short_scores)); },
               {"tokenizer.ggml.scores has " + std::to_string(n - 1) + " entries"});
  const std::string good = write("scores_ok.gguf", Value::of_f32s(std::vector<float>(n, -1000.0f)));
  EXPECT_EQ(Vocab::from_gguf(df::gguf::File::open(good)).size(), n);
}

// --- The fixture: llama.cpp's results for the synthetic Gemma 4 vocabularies ---

const json& fixture() {
  static const json j = [] {
    std::ifstream in(std::filesystem::path(__FILE__).parent_path() / "data/tokenizer/gemma4_cases.json");
    if (!in) throw std::runtime_error("cannot open tests/data/tokenizer/gemma4_cases.json");
    return json::parse(in);
  }();
  return j;
}

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

// The fixture's vocabulary as a vocabulary-only GGUF with the keys llama.cpp's Gemma 4 converter writes (and
// df::synth::write_vocab writes), read back through Tokenizer::from_gguf.
Tokenizer load_fixture_vocab(const json& v) {
  using df::gguf::Value;
  const auto tokens = v["tokens"].get<std::vector<std::string>>();
  df::gguf::Writer w;
  w.set("general.architecture", Value::of_string("gemma4"));
  w.set("tokenizer.ggml.model", Value::of_string("gemma4"));
  w.set("tokenizer.ggml.tokens", Value::of_strings(tokens));
  w.set("tokenizer.ggml.scores", Value::of_f32s(std::vector<float>(tokens.size(), -1000.0f)));
  w.set("tokenizer.ggml.token_type", Value::of_i32s(v["token_types"].get<std::vector<int32_t>>()));
  w.set("tokenizer.ggml.merges", Value::of_strings(v["merges"].get<std::vector<std::string>>()));
  w.set("tokenizer.ggml.bos_token_id", Value::of_u32(2));
  w.set("tokenizer.ggml.eos_token_id", Value::of_u32(1));
  w.set("tokenizer.ggml.unknown_token_id", Value::of_u32(3));
  w.set("tokenizer.ggml.padding_token_id", Value::of_u32(0));
  w.set("tokenizer.ggml.add_space_prefix", Value::of_bool(false));
  w.set("tokenizer.ggml.add_bos_token", Value::of_bool(true));
  w.set("tokenizer.chat_template", Value::of_string(fixture()["chat_template"].get<std::string>()));
  std::filesystem::create_directories(DF_TEST_TMP);
  const std::string path = fmt::format("{}/gemma4_{}.gguf", DF_TEST_TMP, v["n_vocab"].get<int>());
  w.write(path, std::vector<std::vector<uint8_t>>{});
  return Tokenizer::from_gguf(df::gguf::File::open(path));
}

class Gemma4Fixture : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    v_ = &fixture()["vocabs"][GetParam()];
    tok_ = std::make_unique<Tokenizer>(load_fixture_vocab(*v_));
  }
  const json* v_ = nullptr;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(Gemma4Fixture, FlagsSpecialIdsAndEndOfGeneration) {
  const json& v = *v_;
  EXPECT_EQ(tok_->n_vocab(), v["n_vocab"].get<size_t>());
  EXPECT_EQ(tok_->bos(), v["bos"].get<TokenId>());
  EXPECT_EQ(tok_->eos(), v["eos"].get<TokenId>());
  EXPECT_EQ(tok_->add_bos(), v["add_bos"].get<bool>());
  EXPECT_EQ(tok_->add_eos(), v["add_eos"].get<bool>());
  const auto& eog = tok_->vocab().eog_ids();
  EXPECT_EQ(std::vector<TokenId>(eog.begin(), eog.end()), v["eog"].get<std::vector<TokenId>>());
}

TEST_P(Gemma4Fixture, TokenAttributesAndPieces) {
  const json& v = *v_;
  const json& odd = v["attrs_not_normal"];
  for (size_t id = 0; id < tok_->n_vocab(); ++id) {
    const std::string key = std::to_string(id);
    const uint32_t expected = odd.contains(key) ? odd[key].get<uint32_t>() : uint32_t{df::tok::kAttrNormal};
    EXPECT_EQ(tok_->vocab().attr(static_cast<TokenId>(id)), expected) << "token " << id;
  }
  if (!v.contains("pieces_hex")) return;
  const auto pieces = v["pieces_hex"].get<std::vector<std::string>>();
  ASSERT_EQ(pieces.size(), tok_->n_vocab());
  for (size_t id = 0; id < pieces.size(); ++id) {
    EXPECT_EQ(to_hex(tok_->token_to_piece(static_cast<TokenId>(id), true)), pieces[id]) << "token " << id;
  }
}

TEST_P(Gemma4Fixture, EncodeAsLlamaCpp) {
  const json& cases = (*v_)["cases"];
  ASSERT_GE(cases.size(), 27u + 50u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tok_->encode(text, false, false), c["ids"].get<std::vector<TokenId>>());
    EXPECT_EQ(tok_->encode(text, true, false), c["ids_add"].get<std::vector<TokenId>>());
    EXPECT_EQ(tok_->encode(text, false, true), c["ids_parse"].get<std::vector<TokenId>>());
    EXPECT_EQ(tok_->encode(text, true, true), c["ids_add_parse"].get<std::vector<TokenId>>());
  }
}

TEST_P(Gemma4Fixture, DecodeAsLlamaCpp) {
  const auto check = [&](const json& c, const std::vector<TokenId>& ids) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto expected = c["detok_hex"].get<std::vector<std::string>>();
    ASSERT_EQ(expected.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      const bool remove_special = k >= 2, unparse_special = k % 2 == 1;
      EXPECT_EQ(to_hex(tok_->decode(ids, remove_special, unparse_special)), expected[size_t(k)])
          << "remove_special=" << remove_special << " unparse_special=" << unparse_special;
    }
  };
  for (const json& c : (*v_)["cases"]) check(c, c["ids_add_parse"].get<std::vector<TokenId>>());
  ASSERT_GE((*v_)["detok_cases"].size(), 10u);
  for (const json& c : (*v_)["detok_cases"]) check(c, c["ids"].get<std::vector<TokenId>>());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, Gemma4Fixture, ::testing::Values(size_t{0}, size_t{1}),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return "n_vocab_" +
                                  std::to_string(fixture()["vocabs"][info.param]["n_vocab"].get<int>());
                         });

TEST(Gemma4ChatTemplate, RendersAsLlamaCpp) {
  // The fixture's prompts are llama.cpp's, which strips the template's leading <bos> because the vocabulary
  // adds BOS itself; rendered here the same way.
  const df::ChatTemplate tmpl(fixture()["chat_template"].get<std::string>());
  const json& cases = fixture()["chat_cases"];
  ASSERT_GE(cases.size(), 5u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<df::ChatMessage> messages;
    for (const json& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    df::ChatOptions opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    opt.enable_thinking = c["enable_thinking"].get<bool>();
    opt.bos_token = "<bos>";
    opt.eos_token = "<eos>";
    opt.strip_leading_bos = true;
    EXPECT_EQ(tmpl.render(messages, opt), c["prompt"].get<std::string>());
  }
}

}  // namespace

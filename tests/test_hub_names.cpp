// What names pull and -hf accept (hub/names.h, hub/model_ref.h), how a quant tag picks a file
// (hub/file_choice.h), and how a listing from the hub is checked (hub/hf_listing.h). Everything here comes
// from outside, so most cases are refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "error_matchers.h"
#include "hub/file_choice.h"
#include "hub/hf_listing.h"
#include "hub/model_ref.h"
#include "hub/names.h"
#include "util/error.h"

using namespace df;
using namespace df::hub;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

const std::string kSha(64, 'a');
const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

RepoListing listing_of(const std::vector<std::string>& files) {
  RepoListing l;
  l.commit = kCommit;
  for (const auto& f : files) l.files.push_back(RepoFile{f, 100, kSha});
  return l;
}

}  // namespace

TEST(HubNames, RepoNamesFollowTheHubsRules) {
  EXPECT_NO_THROW(check_repo_name("LiquidAI/LFM2.5-24B-A2B-GGUF"));
  EXPECT_NO_THROW(check_repo_name("a/b_c.d-e"));
  for (const char* bad : {"", "noslash", "/x", "x/", "a/b/c", "../x", "a/..", "a/b..c", "a--b/c", "a/-b",
                          "a/.b", "a/b c", "a/b?c", "a/b%2e", "a:b/c"})
    EXPECT_THROW(check_repo_name(bad), Error) << bad;
  EXPECT_THROW(check_repo_name(std::string(97, 'a') + "/b"), Error);
}

TEST(HubNames, RepoFilesAreRelativeAndPlain) {
  for (const char* ok : {"a.gguf", "Q4_K_M/model-Q4_K_M.gguf", "x+y-1.0_a.gguf", ".gitattributes", "a/.b"})
    EXPECT_TRUE(is_safe_repo_file(ok)) << ok;
  for (const char* bad : {"", "/etc/passwd", "../a.gguf", "a/../b.gguf", "a//b.gguf", "a/", "a/./b", "./a",
                          "a b.gguf", "a\\b.gguf", "a\nb", "..", "."})
    EXPECT_FALSE(is_safe_repo_file(bad)) << bad;
  EXPECT_FALSE(is_safe_repo_file(std::string(256, 'a')));
}

TEST(HubNames, RevisionsAreBranchesTagsOrCommits) {
  EXPECT_NO_THROW(check_revision("main"));
  EXPECT_NO_THROW(check_revision("refs/pr/1"));
  EXPECT_NO_THROW(check_revision(kCommit));
  for (const char* bad : {"", "-x", "/main", "a..b", "a b", "a?b", "a#b"})
    EXPECT_THROW(check_revision(bad), Error) << bad;
  EXPECT_TRUE(is_commit_id(kCommit));
  EXPECT_FALSE(is_commit_id("0123"));
  EXPECT_FALSE(is_commit_id(std::string(40, 'g')));
}

TEST(HubModelRef, KnownNameTakesThePinExactly) {
  const ModelRef r = parse_model_ref("LFM2.5-24B");
  ASSERT_NE(r.pin, nullptr);
  EXPECT_EQ(r.repo, "LiquidAI/LFM2.5-24B-A2B-GGUF");
  EXPECT_EQ(r.selector.file, "LFM2.5-24B-A2B-QAD-Q4_0.gguf");
  EXPECT_EQ(r.revision, "f97fc8a443da86c71818adf91baecde5b7ef4c50");
  EXPECT_EQ(r.pin->sha256, "89617cc4d3a52e973ee8dea72c7df04285f582107385796ba903f81e540e4afa");
  EXPECT_EQ(r.pin->size, 13578190880ull);
}

TEST(HubModelRef, TheReadmesRepoAndQuantTakeThePinToo) {
  for (const char* spec :
       {"LiquidAI/LFM2.5-24B-A2B-GGUF:Q4_0", "liquidai/lfm2.5-24b-a2b-gguf:q4_0",
        "LiquidAI/LFM2.5-24B-A2B-GGUF", "LiquidAI/LFM2.5-24B-A2B-GGUF/LFM2.5-24B-A2B-QAD-Q4_0.gguf"}) {
    const ModelRef r = parse_model_ref(spec);
    ASSERT_NE(r.pin, nullptr) << spec;
    EXPECT_EQ(r.revision, "f97fc8a443da86c71818adf91baecde5b7ef4c50");
    EXPECT_EQ(r.repo, "LiquidAI/LFM2.5-24B-A2B-GGUF");
  }
  // Another quant of the same repository, or another revision, is not the pin.
  EXPECT_EQ(parse_model_ref("LiquidAI/LFM2.5-24B-A2B-GGUF:Q8_0").pin, nullptr);
  const ModelRef other = parse_model_ref("LiquidAI/LFM2.5-24B-A2B-GGUF:Q4_0", "main");
  EXPECT_EQ(other.pin, nullptr);
  EXPECT_EQ(other.revision, "main");
}

TEST(HubModelRef, RepoQuantAndFileForms) {
  ModelRef r = parse_model_ref("org/repo:Q4_K_M");
  EXPECT_EQ(r.repo, "org/repo");
  EXPECT_EQ(r.selector.quant, "Q4_K_M");
  EXPECT_EQ(r.revision, "main");
  r = parse_model_ref("org/repo/sub/m-Q8_0.gguf", "v1.0");
  EXPECT_EQ(r.repo, "org/repo");
  EXPECT_EQ(r.selector.file, "sub/m-Q8_0.gguf");
  EXPECT_EQ(r.revision, "v1.0");
  r = parse_model_ref("org/repo");
  EXPECT_TRUE(r.selector.file.empty() && r.selector.quant.empty());
}

TEST(HubModelRef, RefusesWhatCouldEscapeOrIsNotAName) {
  EXPECT_HAS(error_of([] { parse_model_ref("nosuchmodel"); }), "neither a known model");
  EXPECT_HAS(error_of([] { parse_model_ref("org/repo/../../etc/passwd"); }), "not a file name");
  EXPECT_HAS(error_of([] { parse_model_ref("org/repo//abs.gguf"); }), "not a file name");
  EXPECT_HAS(error_of([] { parse_model_ref("org/repo:"); }), "quant tag");
  EXPECT_HAS(error_of([] { parse_model_ref("org/repo:Q4 0"); }), "quant tag");
  EXPECT_HAS(error_of([] { parse_model_ref("../repo:Q4_0"); }), "not a Hugging Face repository name");
  EXPECT_HAS(error_of([] { parse_model_ref("org/repo", "../main"); }), "not a revision");
  EXPECT_HAS(error_of([] { parse_model_ref(""); }), "no model named");
}

TEST(HubFileChoice, QuantTagsMatchBetweenSeparators) {
  EXPECT_TRUE(matches_quant("LFM2.5-24B-A2B-QAD-Q4_0.gguf", "Q4_0"));
  EXPECT_TRUE(matches_quant("LFM2.5-24B-A2B-QAD-Q4_0.gguf", "q4_0"));
  EXPECT_TRUE(matches_quant("m.Q4_K_M.gguf", "Q4_K_M"));
  EXPECT_TRUE(matches_quant("m-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"));
  EXPECT_TRUE(matches_quant("sub/m-Q8_0-00001-of-00002.gguf", "Q8_0"));
  EXPECT_FALSE(matches_quant("m-Q4_0_4_4.gguf", "Q4_0"));
  EXPECT_FALSE(matches_quant("m-Q4_K_M.gguf", "Q4_K"));
  EXPECT_FALSE(matches_quant("m-IQ4_0.gguf", "Q4_0"));
  EXPECT_FALSE(matches_quant("Q4_0/m-F16.gguf", "Q4_0"));  // the file's own name decides
  EXPECT_EQ(split_part_count("m-Q8_0-00001-of-00003.gguf"), 3);
  EXPECT_EQ(split_part_count("m-Q8_0.gguf"), 0);
  EXPECT_EQ(split_part_count("m-0001-of-0003.gguf"), 0);
}

TEST(HubFileChoice, PicksTheOneMatchOrListsThemAll) {
  const RepoListing l =
      listing_of({"README.md", "m-Q4_0.gguf", "m-Q8_0.gguf", "m-imat-Q8_0.gguf", "mmproj-m-F16.gguf",
                  "big-Q2_K-00001-of-00002.gguf", "big-Q2_K-00002-of-00002.gguf"});
  EXPECT_EQ(choose_file(l, {"", "Q4_0"}, "org/m", "main").path, "m-Q4_0.gguf");
  EXPECT_EQ(choose_file(l, {"m-Q8_0.gguf", ""}, "org/m", "main").path, "m-Q8_0.gguf");
  const std::string several = error_of([&] { choose_file(l, {"", "Q8_0"}, "org/m", "main"); });
  EXPECT_HAS(several, "2 GGUF files match the quant tag 'Q8_0'");
  EXPECT_HAS(several, "  m-Q8_0.gguf\n  m-imat-Q8_0.gguf");
  EXPECT_HAS(several, "org/m/FILE");
  const std::string none = error_of([&] { choose_file(l, {"", "Q5_K_S"}, "org/m", "main"); });
  EXPECT_HAS(none, "no GGUF file with the quant tag 'Q5_K_S'");
  EXPECT_HAS(none, "m-Q4_0.gguf");
  EXPECT_EQ(none.find("mmproj"), std::string::npos) << none;
  EXPECT_HAS(error_of([&] { choose_file(l, {"", "Q2_K"}, "org/m", "main"); }), "split into 2 files");
  EXPECT_HAS(error_of([&] {
               choose_file(l, {"big-Q2_K-00001-of-00002.gguf", ""}, "org/m", "main");
             }),
             "split");
  EXPECT_HAS(error_of([&] {
               choose_file(l, {"nope.gguf", ""}, "org/m", "main");
             }),
             "has no file 'nope.gguf'");
  EXPECT_HAS(error_of([&] { choose_file(l, {"README.md", ""}, "org/m", "main"); }), "not a GGUF");
  EXPECT_HAS(error_of([&] { choose_file(l, {"", ""}, "org/m", "main"); }), "GGUF files match");
  EXPECT_EQ(
      choose_file(listing_of({"a.txt", "only-Q4_0.gguf", "mmproj-x.gguf"}), {"", ""}, "org/m", "main").path,
      "only-Q4_0.gguf");
}

TEST(HubListing, ReadsTheHubsShape) {
  const nlohmann::json j = {
      {"id", "org/m"},
      {"sha", kCommit},
      {"siblings",
       {{{"rfilename", ".gitattributes"}, {"size", 1519}, {"blobId", "x"}},
        {{"rfilename", "m-Q4_0.gguf"},
         {"size", 1234},
         {"lfs", {{"sha256", std::string(64, 'B')}, {"size", 1234}, {"pointerSize", 134}}}},
        {{"rfilename", "m-Q8_0.gguf"}, {"lfs", {{"oid", "sha256:" + std::string(64, 'c')}, {"size", 99}}}}}}};
  const RepoListing l = parse_listing(j.dump(), "main", "test");
  EXPECT_EQ(l.commit, kCommit);
  ASSERT_EQ(l.files.size(), 3u);
  EXPECT_EQ(l.files[0].sha256, "");
  EXPECT_EQ(l.files[1].sha256, std::string(64, 'b'));
  EXPECT_EQ(l.files[1].size, 1234u);
  EXPECT_EQ(l.files[2].sha256, std::string(64, 'c'));
  EXPECT_EQ(l.files[2].size, 99u);
}

TEST(HubListing, RefusesHostileOrBrokenAnswers) {
  auto with = [](nlohmann::json sibling) {
    return nlohmann::json{{"sha", kCommit}, {"siblings", {sibling}}}.dump();
  };
  auto err = [](const std::string& text, const std::string& rev = "main") {
    return error_of([&] { parse_listing(text, rev, "the listing"); });
  };
  EXPECT_HAS(err("not json"), "not JSON");
  EXPECT_HAS(err("[]"), "not a JSON object");
  EXPECT_HAS(err(R"({"siblings": []})"), "does not say which commit");
  EXPECT_HAS(err(R"({"sha": "abc", "siblings": []})"), "not a commit id");
  EXPECT_HAS(err(nlohmann::json{{"sha", kCommit}}.dump()), "no \"siblings\"");
  EXPECT_HAS(err(nlohmann::json{{"sha", kCommit}, {"siblings", {}}}.dump(), std::string(40, 'f')),
             "asked for commit");
  EXPECT_HAS(err(with({{"rfilename", "../../etc/passwd.gguf"}})), "unsafe file");
  EXPECT_HAS(err(with({{"rfilename", "/abs.gguf"}})), "unsafe file");
  EXPECT_HAS(err(with({{"rfilename", 7}})), "rfilename");
  EXPECT_HAS(err(with({{"rfilename", "a.gguf"}, {"size", -1}})), "not a file size");
  EXPECT_HAS(err(with({{"rfilename", "a.gguf"}, {"size", 1.5}})), "not a file size");
  EXPECT_HAS(err(with({{"rfilename", "a.gguf"}, {"size", "12"}})), "not a file size");
  EXPECT_HAS(err(with({{"rfilename", "a.gguf"}, {"lfs", {{"sha256", kSha}, {"size", 1ull << 60}}}})),
             "not a file size");
  EXPECT_HAS(err(with({{"rfilename", "a.gguf"}, {"lfs", {{"sha256", "xyz"}, {"size", 1}}}})), "LFS sha256");
  EXPECT_HAS(err(with({{"rfilename", "a.gguf"}, {"lfs", {{"sha256", kSha}}}})), "no size");
  EXPECT_HAS(err(with({{"rfilename", "a.gguf"}, {"lfs", "x"}})), "not an object");
  EXPECT_HAS(err(with({{"rfilename", "a.gguf"}, {"size", 5}, {"lfs", {{"sha256", kSha}, {"size", 6}}}})),
             "5 bytes and an LFS object of 6");
  const nlohmann::json twice = {{"sha", kCommit},
                                {"siblings", {{{"rfilename", "a.gguf"}}, {{"rfilename", "a.gguf"}}}}};
  EXPECT_HAS(err(twice.dump()), "listed twice");
  EXPECT_HAS(err(std::string(kMaxListingBytes + 1, ' ')), "more than a listing can be");
}

#pragma once
// Starts tests/scripts/hf_test_server.py (a loopback stand-in for the Hugging Face hub) for one test and
// stops it afterwards. The test describes the repositories and the faults as JSON (configure), and reads back
// every request the server saw (requests).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace df::testing {

class HubTestServer {
 public:
  // `dir` holds the config and the request log.
  explicit HubTestServer(const std::string& dir)
      : config_(dir + "/hub-config.json"), log_(dir + "/hub-requests.log") {
    configure(nlohmann::json{{"repos", nlohmann::json::object()}});
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a test process that dies (a crash, a closed pipe) takes it along
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      const std::string script = std::string(DF_TEST_SCRIPTS_DIR) + "/hf_test_server.py";
      ::execlp("python3", "python3", script.c_str(), "--config", config_.c_str(), "--log", log_.c_str(),
               static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    ::close(out[1]);
    // "PORT N\n", within 20 s (python3 starts in well under a second; sanitizer builds are slower).
    std::string line;
    pollfd p{out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && ::poll(&p, 1, 20000) > 0) {
      char buf[64];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    if (!line.starts_with("PORT "))
      throw std::runtime_error("the test hub server did not start: '" + line + "'");
    port_ = std::stoi(line.substr(5));
  }
  ~HubTestServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }
  HubTestServer(const HubTestServer&) = delete;
  HubTestServer& operator=(const HubTestServer&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Replaced atomically: the server re-reads it on every request (and resets its fault counters).
  void configure(const nlohmann::json& config) {
    const std::string tmp = config_ + ".tmp";
    std::ofstream(tmp) << config.dump(2);
    std::filesystem::rename(tmp, config_);
  }

  std::vector<nlohmann::json> requests() const {
    std::vector<nlohmann::json> r;
    std::ifstream in(log_);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) r.push_back(nlohmann::json::parse(line));
    return r;
  }
  // Requests whose path contains `part`.
  std::vector<nlohmann::json> requests_to(const std::string& part) const {
    std::vector<nlohmann::json> r;
    for (auto& q : requests())
      if (q["path"].get<std::string>().find(part) != std::string::npos) r.push_back(q);
    return r;
  }
  void clear_log() { std::ofstream(log_, std::ios::trunc); }

 private:
  std::string config_, log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A repository of the config: files map repository paths to files on disk.
inline nlohmann::json hub_repo(const std::string& commit,
                               const std::vector<std::pair<std::string, std::string>>& files) {
  nlohmann::json r{{"commit", commit}, {"branches", {"main"}}, {"files", nlohmann::json::object()}};
  for (const auto& [name, path] : files) r["files"][name] = {{"source", path}};
  return r;
}

}  // namespace df::testing

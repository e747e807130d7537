// SPDX-License-Identifier: Apache-2.0
//
// Runs the packet fuzzer's inputs without libFuzzer, with any compiler: the seed corpus and every
// crash input ever found run in the ordinary test suite (and under the sanitizer builds).
//
//   qsdp_fuzz_replay <file or directory>...   run each input, print how many ran
//   qsdp_fuzz_replay --write-seeds <dir>      write the seed corpus (tests/fuzz/corpus) into <dir>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_packets.hpp"

namespace {

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int write_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto seeds = qsdp_fuzz::seed_inputs();
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "seed-%04zu", i);
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()),
              static_cast<std::streamsize>(seeds[i].size()));
    if (!out) {
      std::fprintf(stderr, "qsdp_fuzz_replay: cannot write %s\n", (dir / name).c_str());
      return 1;
    }
  }
  std::printf("wrote %zu seed inputs to %s\n", seeds.size(), dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-seeds") return write_seeds(argv[2]);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <file or directory>... | --write-seeds <dir>\n", argv[0]);
    return 2;
  }
  std::size_t inputs = 0;
  try {
    for (int a = 1; a < argc; ++a) {
      const std::filesystem::path path(argv[a]);
      if (std::filesystem::is_directory(path)) {
        for (const auto& entry : std::filesystem::directory_iterator(path)) {
          if (!entry.is_regular_file()) continue;
          const auto bytes = read_file(entry.path());
          qsdp_fuzz::run_one_input(bytes.data(), bytes.size());
          ++inputs;
        }
      } else {
        const auto bytes = read_file(path);
        qsdp_fuzz::run_one_input(bytes.data(), bytes.size());
        ++inputs;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsdp_fuzz_replay: %s\n", e.what());
    return 1;
  }
  if (inputs == 0) {
    std::fprintf(stderr, "qsdp_fuzz_replay: no inputs found in the arguments\n");
    return 1;
  }
  std::printf("qsdp_fuzz_replay: %zu inputs ran, no property broken\n", inputs);
  return 0;
}

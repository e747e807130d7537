// SPDX-License-Identifier: Apache-2.0
//
// The training text: read from a file or a directory of text files, mapped to a 96-symbol
// vocabulary (newline and printable ASCII; tabs become spaces, everything else is dropped), split
// into train and validation; batches drawn by a seeded generator so that every run, and every world
// size, sees the same examples in the same order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model.hpp"

namespace fsdp_train {

inline constexpr int vocabulary_size = 96;

/// Newline -> 0, ' '..'~' -> 1..95, tab -> space; -1 for anything else.
inline int token_of(unsigned char ch) {
  if (ch == '\n') return 0;
  if (ch == '\t') ch = ' ';
  if (ch >= 32 && ch <= 126) return ch - 31;
  return -1;
}

struct corpus {
  std::vector<std::uint8_t> train, validation;
  std::size_t files = 0, bytes_read = 0;
};

/// Reads `path` (a text file, or every regular, non-binary file of a directory in name order;
/// symbolic links are skipped, so a directory's aliases are not read twice) and keeps the last
/// `validation_fraction` of the text for validation.
inline corpus load_corpus(const std::string& path, double validation_fraction,
                          std::size_t min_chars) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_regular_file() && !entry.is_symlink()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    throw std::runtime_error("--data " + path +
                             ": no such file or directory (examples/fsdp_train/setup.sh installs "
                             "the default text)");
  }
  corpus c;
  std::vector<std::uint8_t> text;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (content.find('\0') != std::string::npos) continue;  // binary (e.g. fortune's .dat indexes)
    ++c.files;
    c.bytes_read += content.size();
    for (const char ch : content) {
      const int t = token_of(static_cast<unsigned char>(ch));
      if (t >= 0) text.push_back(static_cast<std::uint8_t>(t));
    }
  }
  if (text.size() < min_chars)
    throw std::runtime_error("--data " + path + ": " + std::to_string(text.size()) +
                             " usable characters in " + std::to_string(c.files) +
                             " text file(s); expected at least " + std::to_string(min_chars));
  if (!(validation_fraction > 0 && validation_fraction < 1))
    throw std::runtime_error("validation fraction " + std::to_string(validation_fraction) +
                             ": expected (0, 1)");
  const auto split =
      static_cast<std::size_t>(static_cast<double>(text.size()) * (1.0 - validation_fraction));
  c.train.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(split));
  c.validation.assign(text.begin() + static_cast<std::ptrdiff_t>(split), text.end());
  return c;
}

/// This rank's slice of the global batch of `step`: the generator draws global_batch window starts
/// from (seed, step), and rank r takes examples [r * B / world, (r + 1) * B / world).
inline batch training_batch(const std::vector<std::uint8_t>& text, int context,
                            std::size_t global_batch, std::uint64_t seed, std::uint64_t step,
                            int rank, int world) {
  const auto k = static_cast<std::size_t>(context);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + step);
  std::uniform_int_distribution<std::size_t> start(0, text.size() - k - 1);
  const std::size_t per_rank = global_batch / static_cast<std::size_t>(world);
  const std::size_t first = per_rank * static_cast<std::size_t>(rank);
  batch out;
  out.size = per_rank;
  out.tokens.resize(per_rank * (k + 1));
  for (std::size_t i = 0; i < global_batch; ++i) {
    const std::size_t s = start(rng);  // drawn on every rank, so the stream stays the same
    if (i < first || i >= first + per_rank) continue;
    std::copy_n(text.begin() + static_cast<std::ptrdiff_t>(s), k + 1,
                out.tokens.begin() + static_cast<std::ptrdiff_t>((i - first) * (k + 1)));
  }
  return out;
}

/// This rank's share of `examples` evenly spaced validation windows (example i goes to rank i %
/// world).
inline batch validation_batch(const std::vector<std::uint8_t>& text, int context,
                              std::size_t examples, int rank, int world) {
  const auto k = static_cast<std::size_t>(context);
  const std::size_t stride = std::max<std::size_t>(1, (text.size() - k - 1) / examples);
  batch out;
  for (std::size_t i = static_cast<std::size_t>(rank); i < examples;
       i += static_cast<std::size_t>(world)) {
    const std::size_t s = std::min(i * stride, text.size() - k - 1);
    out.tokens.insert(out.tokens.end(), text.begin() + static_cast<std::ptrdiff_t>(s),
                      text.begin() + static_cast<std::ptrdiff_t>(s + k + 1));
    ++out.size;
  }
  return out;
}

}  // namespace fsdp_train

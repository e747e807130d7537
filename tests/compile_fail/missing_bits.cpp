// expect: does not satisfy qsdp::quantizer: missing member .static constexpr int bits.
#include <qsdp/codec.hpp>

struct no_bits {
  static constexpr bool randomized = false;
  std::size_t bucket_size = 64;
  using meta_type = float;
  meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  std::uint32_t encode(float, const meta_type&, float) const { return 0; }
  float decode(std::uint32_t, const meta_type&) const { return 0; }
};

int main() { return static_cast<int>(qsdp::compressed_size<float>(no_bits{}, 10)); }

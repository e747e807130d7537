// expect: does not satisfy qsdp::quantizer: .bits. must be 1\.\.8
#include <qsdp/codec.hpp>

struct nine_bits {
  static constexpr int bits = 9;
  static constexpr bool randomized = false;
  std::size_t bucket_size = 64;
  using meta_type = float;
  meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  std::uint32_t encode(float, const meta_type&, float) const { return 0; }
  float decode(std::uint32_t, const meta_type&) const { return 0; }
};

int main() { return static_cast<int>(qsdp::compressed_size<float>(nine_bits{}, 10)); }

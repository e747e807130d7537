// expect: does not satisfy qsdp::quantizer: missing member .meta_type fit\(const
// qsdp::bucket_stats&\) const. A policy without fit(): the codec must say which member is missing,
// in one line.
#include <qsdp/codec.hpp>

struct no_fit {
  static constexpr int bits = 4;
  static constexpr bool randomized = false;
  std::size_t bucket_size = 64;
  using meta_type = float;
  std::uint32_t encode(float, const meta_type&, float) const { return 0; }
  float decode(std::uint32_t, const meta_type&) const { return 0; }
};

int main() {
  float x[4] = {};
  std::byte packet[256];
  qsdp::encode(no_fit{}, x, 4, packet);
}

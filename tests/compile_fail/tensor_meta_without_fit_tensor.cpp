// expect: a policy with .tensor_meta_type. needs .tensor_meta_type fit_tensor\(float abs_max\)
// const. A policy that declares packet-wide metadata but cannot fit it: the codec names the member.
#include <qsdp/codec.hpp>

struct no_fit_tensor {
  static constexpr int bits = 4;
  static constexpr bool randomized = false;
  std::size_t bucket_size = 64;
  using meta_type = float;
  using tensor_meta_type = float;
  float tensor_meta = 1.0f;
  meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  std::uint32_t encode(float, const meta_type&, float) const { return 0; }
  float decode(std::uint32_t, const meta_type&) const { return 0; }
};

int main() {
  float x[4] = {};
  std::byte packet[256];
  qsdp::encode(no_fit_tensor{}, x, 4, packet);
}

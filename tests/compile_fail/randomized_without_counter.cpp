// expect: a randomized policy needs a member .qsdp::call_counter calls.
// Without a call counter every call would draw the same numbers: refused at compile time.
#include <qsdp/codec.hpp>

struct coin {
  static constexpr int bits = 1;
  static constexpr bool randomized = true;
  std::size_t bucket_size = 64;
  using meta_type = float;
  meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  std::uint32_t encode(float, const meta_type&, float u) const { return u < 0.5f; }
  float decode(std::uint32_t c, const meta_type& m) const { return c ? m : -m; }
};

int main() {
  float x[4] = {};
  std::byte packet[256];
  qsdp::encode(coin{}, x, 4, packet);
}

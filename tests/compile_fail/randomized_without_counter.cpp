// expect: a randomized policy needs a member .qsdp::call_counter calls.
// Without a call counter every call would draw the same numbers: refused at compile time.
#include <qsdp/codec.hpp>

#include "policies.hpp"

struct coin : qsdp_test::policy_without_bits {
  static constexpr int bits = 1;
  static constexpr bool randomized = true;
};

int main() {
  float x[4] = {};
  std::byte packet[256];
  qsdp::encode(coin{}, x, 4, packet);
}

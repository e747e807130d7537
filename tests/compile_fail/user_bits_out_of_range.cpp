// expect: does not satisfy qsdp::quantizer: .bits. must be 1\.\.8
#include <qsdp/codec.hpp>

#include "policies.hpp"

struct nine_bits : qsdp_test::policy_without_bits {
  static constexpr int bits = 9;
};

int main() { return static_cast<int>(qsdp::compressed_size<float>(nine_bits{}, 10)); }

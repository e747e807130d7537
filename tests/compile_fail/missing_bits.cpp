// expect: does not satisfy qsdp::quantizer: missing member .static constexpr int bits.
#include <qsdp/codec.hpp>

#include "policies.hpp"

struct no_bits : qsdp_test::policy_without_bits {};

int main() { return static_cast<int>(qsdp::compressed_size<float>(no_bits{}, 10)); }
